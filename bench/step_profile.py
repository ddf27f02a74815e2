"""Where a round's time goes, by profile: a ``tf.profiler`` trace of showtell's loop and of Keras
``fit`` (``bench/steps_per_loop.py``'s two sides, same model, data, batch, clipping and steps), and
of the two swapped — ``fit``'s loop running showtell's step, showtell's loop running the step
``fit``'s peer runs — each round of each side a fresh process, order alternating.

Per side, from the trace's host plane (``*.xplane.pb``): the time inside the traced calls and the
Python between them (dispatch), the compute threads' op time by op type (the executor's trace
events ``name:Type``), the input pipeline's threads, and examples/s of the profiled round.  Op
*counts* of cheap ops are not compared: the executor traces an op only while its running cost
estimate says it is expensive, which differs by process; times are (an untraced cheap op's time
is counted in no row, on either side).

    .venv/bin/python bench/step_profile.py [--rounds 3] [--steps 100] [--n 10] [--model im2txt|small]
        [--top 12] [--out bench/results/step_profile.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import tensorflow as tf
from rounds import MIN_ROUNDS, add_out, order, publish, ratio, spread
from steps_per_loop import MODELS, OPTIMIZER, FitPeer, keras_side, showtell_side, task
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from showtell.captioning.config import SyntheticConfig
from showtell.captioning.data import synthetic

SIDES = ("showtell", "keras_fit", "fit_loop_showtell_step", "showtell_loop_fit_step")
OP_EVENT = re.compile(r"^[^:]+:([A-Za-z_][A-Za-z0-9_]*)$")  # the executor's "node/name:OpType"
CALLS = ("train_loop", "multi_step_on_iterator")  # each side's traced call, on the Python thread


def fit_loop_showtell_step(data: Path, model_dir: Path, model, batch: int, n: int):
    """``fit``'s loop (``steps_per_execution`` n) running showtell's own step (its replica step:
    loss over the global batch's words, clipping, its optimizer, the global step)."""
    caption, dataset = task(data, model_dir, model, batch, False, 1, autotune=False)

    class Peer(FitPeer):
        def train_step(self, batch):
            return {"loss": caption.replica_step(batch)}

    peer = Peer(caption.model, OPTIMIZER.clip_gradients)
    peer.compile(optimizer=keras.optimizers.SGD(OPTIMIZER.learning_rate), steps_per_execution=n,
                 jit_compile=False)

    def one_round(steps: int) -> float:
        before, start = int(caption.optimizer.iterations.numpy()), time.perf_counter()
        peer.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0)
        seconds = time.perf_counter() - start
        return (int(caption.optimizer.iterations.numpy()) - before) * caption.batch_size / seconds

    return one_round


def showtell_loop_fit_step(data: Path, model_dir: Path, model, batch: int, n: int):
    """showtell's controller, runner and report running the step ``fit``'s peer runs (its loss,
    clipping and Keras optimizer; the global step counted as showtell counts it)."""
    caption, _ = task(data, model_dir, model, batch, False, n, autotune=False)
    peer = FitPeer(caption.model, OPTIMIZER.clip_gradients)
    peer.compile(optimizer=keras.optimizers.SGD(OPTIMIZER.learning_rate), jit_compile=False)
    peer.optimizer.build(peer.trainable_variables)  # in the traced loop no variable may be made

    def step(batch, dense=False):
        loss = peer.train_step(batch)["loss"]
        caption.optimizer.iterations.assign_add(1)  # what the round counts, as showtell's step does
        caption.global_step.assign_add(1)
        return loss

    caption.replica_step = step
    return showtell_side(data, model_dir, model, batch, False, n, False, caption=caption)


def build(side: str, data: Path, work: Path, model, batch: int, n: int):
    model_dir = Path(tempfile.mkdtemp(dir=work))
    if side == "showtell":
        return showtell_side(data, model_dir, model, batch, False, n, False)
    if side == "keras_fit":
        return keras_side(data, model_dir, model, batch, False, n, False)
    if side == "fit_loop_showtell_step":
        return fit_loop_showtell_step(data, model_dir, model, batch, n)
    return showtell_loop_fit_step(data, model_dir, model, batch, n)


def busy_seconds(line) -> float:
    """The union of a thread's trace events: how long something ran (or waited inside a traced
    scope) on it."""
    total, end = 0, -1
    for start, stop in sorted((e.offset_ps, e.offset_ps + e.duration_ps) for e in line.events):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total / 1e12


def tables(trace: Path, wall: float, top: int) -> dict[str, object]:
    """The host plane's figures (see the module's docstring)."""
    space = xplane_pb2.XSpace()
    space.ParseFromString(trace.read_bytes())
    host = next(p for p in space.planes if p.name == "/host:CPU")
    ops: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    in_calls = 0.0
    for line in host.lines:
        kind = line.name.split("/")[0]
        threads[kind] += busy_seconds(line)
        for event in line.events:
            name = host.event_metadata[event.metadata_id].name
            if kind == "python" and name in CALLS:
                in_calls += event.duration_ps / 1e12
            elif kind == "tf_Compute" and (match := OP_EVENT.match(name)):
                ops[match.group(1)] += event.duration_ps / 1e12
    return {"round_seconds": round(wall, 3), "inside_traced_calls": round(in_calls, 3),
            "python_between_calls": round(wall - in_calls, 3),
            "op_seconds_total": round(sum(ops.values()), 3),
            "op_seconds_by_type": {k: round(v, 3) for k, v in ops.most_common(top)},
            "thread_busy_seconds": {k: round(v, 3) for k, v in threads.most_common()}}


def one(args: argparse.Namespace) -> int:
    """One side's round in this process: build, one untimed call of N steps, the profiled round."""
    run = build(args.one, args.data, args.work, MODELS[args.model], 32, args.n)
    run(args.n)
    logdir = Path(tempfile.mkdtemp(dir=args.work))
    tf.profiler.experimental.start(str(logdir))
    start = time.perf_counter()
    rate = run(args.steps)
    wall = time.perf_counter() - start
    tf.profiler.experimental.stop()
    trace = next(logdir.glob("plugins/profile/*/*.xplane.pb"))
    print(json.dumps({"examples_per_sec": rate, **tables(trace, wall, args.top)}), flush=True)
    os._exit(0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=100, help="steps in each profiled round")
    parser.add_argument("--n", type=int, default=10, help="steps per call on every side")
    parser.add_argument("--model", choices=tuple(MODELS), default="im2txt")
    parser.add_argument("--top", type=int, default=12, help="op types listed per round")
    add_out(parser, "step_profile")
    parser.add_argument("--one", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        return one(args)
    if args.rounds < MIN_ROUNDS:
        raise SystemExit(f"--rounds {args.rounds}: at least {MIN_ROUNDS}, or the spread means nothing")
    rounds: dict[str, list[dict]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        synthetic.build(data, SyntheticConfig(train_images=600, val_images=8))
        for index in range(args.rounds):
            for side in order(list(SIDES), index):
                argv = [sys.executable, __file__, "--one", side, "--data", str(data), "--work", tmp,
                        "--steps", str(args.steps), "--n", str(args.n), "--model", args.model,
                        "--top", str(args.top)]
                done = subprocess.run(argv, capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    raise SystemExit(f"{side} round {index}: exit {done.returncode}\n{done.stderr[-3000:]}")
                rounds[side].append(json.loads(done.stdout.strip().splitlines()[-1]))
                print(f"round {index} {side}: {rounds[side][-1]['examples_per_sec']:.1f} examples/s",
                      file=sys.stderr, flush=True)
    rates = {side: [r["examples_per_sec"] for r in rs] for side, rs in rounds.items()}
    ops = {side: {"op_seconds_total": statistics.median(r["op_seconds_total"] for r in rs),
                  "python_between_calls": statistics.median(r["python_between_calls"] for r in rs)}
           for side, rs in rounds.items()}
    report = {"model": args.model, "n": args.n, "steps_per_round": args.steps, "rounds": args.rounds,
              "examples_per_sec_profiled": {k: spread(v, 1) for k, v in rates.items()},
              "showtell_over_keras_fit": ratio(rates["showtell"], rates["keras_fit"]),
              "fit_loop_showtell_step_over_keras_fit": ratio(rates["fit_loop_showtell_step"],
                                                             rates["keras_fit"]),
              "showtell_loop_fit_step_over_showtell": ratio(rates["showtell_loop_fit_step"],
                                                            rates["showtell"]),
              "medians": ops, "by_round": rounds}
    publish(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
