"""What the evaluator costs the trainer in ``showtell demo``: the demo's phase-1 trainer with the
demo's evaluator beside it ÷ the same trainer alone, in alternating rounds (``rounds.py``).
Goal ≥ 0.9 on a 2-core machine.

Two model dirs, each trained in ``--seconds`` slices that resume where the last round stopped:
one alone, one watched by a real evaluator with the demo's flags
(``showtell.commands.demo.settings.evaluator_args``),
which evaluates each checkpoint the trainer writes (every 30 s, the demo's setting) and sleeps
between them.  Both start from the same encoder weights file (written here: the speed of a phase-1
step does not depend on what the encoder learnt) on the demo's dataset and feature cache, which the
warm-up round builds.  A round's figure is the time-weighted examples/s of the trainer's logged
windows after its first (graph tracing).  An "alone" round is alone: before it starts, the
evaluator's status (over gRPC) shows it idle with the watched dir's newest checkpoint done — the
order of the sides is reversed every other round, so an alone round may follow a beside round
whose last checkpoint is still being evaluated; the wait is reported.  The evaluator's CPU
seconds (its JVM children included) and evaluations are reported so its own cost can be read apart.

    .venv/bin/python bench/demo_overhead.py [--seconds 60] [--rounds 3] [--eval-threads 1]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path

from rounds import add_out, alternate, publish, ratio, spread

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' process measures, from the checkout
from showtell.commands.demo.settings import TRAIN_FLAGS, evaluator_args  # noqa: E402
from showtell.common import processes  # noqa: E402
from tests.measure import tree_cpu_seconds  # noqa: E402

WINDOW = re.compile(r"step (\d+)/\d+ .* ([0-9.]+) examples/s")
SERVING = re.compile(r"serving \S+ \(\+ health, reflection\) on 127\.0\.0\.1:(\d+)")
NEWEST = re.compile(r'^model_checkpoint_path: "(?:.*/)?ckpt-(\d+)"', re.M)
BATCH = int(TRAIN_FLAGS[TRAIN_FLAGS.index("--batch-size") + 1])


def trainer_rate(log: str) -> float:
    """Time-weighted examples/s over the logged windows after the first."""
    windows = [(int(m.group(1)), float(m.group(2))) for m in WINDOW.finditer(log)]
    if len(windows) < 2:
        raise SystemExit(f"the trainer logged {len(windows)} windows: run longer (--seconds)\n{log[-2000:]}")
    examples = seconds = 0.0
    for (previous, _), (step, rate) in pairwise(windows):
        n = (step - previous) * BATCH
        examples, seconds = examples + n, seconds + n / rate
    return examples / seconds


def wait_idle(log: Path, model_dir: Path, timeout: float = 600) -> float:
    """Seconds until the evaluator's status shows it idle — nothing evaluating, nothing pending —
    having seen the newest checkpoint of ``model_dir`` (the state file's)."""
    import grpc

    from showtell.v1 import metrics_pb2 as pb
    from showtell.v1 import metrics_pb2_grpc as pb_grpc

    started = time.monotonic()
    port = None
    while port is None and time.monotonic() - started < timeout:
        found = SERVING.search(log.read_text()) if log.exists() else None
        port = found and found.group(1)
        time.sleep(0.2)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.MetricsServiceStub(channel)
        while time.monotonic() - started < timeout:
            state = model_dir / "checkpoint"
            named = [int(n) for n in NEWEST.findall(state.read_text())] if state.exists() else [-1]
            status = stub.GetStatus(pb.GetStatusRequest(), timeout=10).status
            idle = status.evaluating_step == -1 and not status.pending_steps
            if idle and status.last_seen_step >= max(named):
                return time.monotonic() - started
            time.sleep(0.5)
    raise SystemExit(f"the evaluator did not go idle within {timeout:.0f} s (log {log})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="training per round and side")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--eval-threads", type=int, default=1)
    add_out(parser, "demo_overhead")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        data, encoder = tmp_path / "data", tmp_path / "encoder.weights.h5"
        for setup in (processes.command("data", "synthetic", "--out", str(data)),
                      [sys.executable, "-c", "import sys; from showtell.captioning.model.network import "
                       "build_encoder; build_encoder(75).save_weights(sys.argv[1])", str(encoder)]):
            done = processes.run_process(setup, cwd=ROOT, env=processes.environment(), timeout=600)
            if done.returncode != 0:
                raise SystemExit(done.stderr[-3000:])
        # The feature cache, once and untimed (as bench/batch_sweep.py builds it): on a slow machine
        # its build took most of a 60-s round, so the first round logged no window.
        cache = processes.run("train", "--data", str(data), "--model-dir", str(tmp_path / "scratch"),
                              "--inception-weights", str(encoder), *TRAIN_FLAGS, "--steps", "1",
                              cwd=ROOT, timeout=900)
        if cache.returncode != 0:
            raise SystemExit(f"building the feature cache: trainer exited {cache.returncode}\n"
                             f"{cache.stderr[-3000:]}")

        def idle_then_train(model: Path) -> float:
            waits.append(round(wait_idle(tmp_path / "evaluator.log", watched), 1))
            return train(model)

        def train(model: Path) -> float:
            run = processes.run("train", "--data", str(data), "--model-dir", str(model), "--max-seconds",
                                str(args.seconds), "--inception-weights", str(encoder), *TRAIN_FLAGS,
                                cwd=ROOT, timeout=args.seconds * 5 + 600)
            if run.returncode != 0:
                raise SystemExit(f"trainer exited {run.returncode}:\n{run.stderr[-3000:]}")
            return trainer_rate(run.stderr)

        watched = tmp_path / "watched"
        evaluator = processes.start(evaluator_args(watched, data, tmp_path / "watched-eval", port=0,
                                                   examples=100, threads=args.eval_threads),
                                    tmp_path / "evaluator.log", cwd=ROOT)
        try:
            waits: list[float] = []
            rates = alternate({"alone": lambda: idle_then_train(tmp_path / "alone"),
                               "beside": lambda: train(watched)}, rounds=args.rounds, warm=1)
            cpu = tree_cpu_seconds(evaluator.pid)
        finally:
            processes.stop(evaluator)
        evaluations = (tmp_path / "evaluator.log").read_text().count(": ok ")
    publish({
        "seconds_per_round": args.seconds, "eval_threads": args.eval_threads,
        "trainer_examples_per_sec": {side: spread(r, 1) for side, r in rates.items()},
        "ratio_beside_over_alone": ratio(rates["beside"], rates["alone"]),
        "goal": 0.9,
        "evaluator": {"cpu_seconds_incl_children": round(cpu, 1), "evaluations": evaluations,
                      "seconds_waited_for_it_to_go_idle_before_each_alone_round": waits},
    }, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
