"""Parameter-server scaling on this machine: steps/s of a local cluster (1 ps, a chief, W workers
as separate processes on 127.0.0.1) with 2 workers ÷ with 1 worker, same per-worker batch, same
model, one run of this script: clusters of 1 and 2 workers alternate over ``--rounds`` rounds
(``rounds.py``), each round a fresh cluster, and the ratio is the median of the per-round ratios.

steps/s comes from the chief's log windows (each window = the steps between two log lines, timed
from schedule to ``join``), after the first window (graph tracing on the workers).  Every process
shares this machine's 2 cores, so this measures the PS machinery here, not multi-host scaling.

    .venv/bin/python bench/ps_cluster.py [--steps 40] [--batch-size 16] [--rounds 3]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from rounds import add_out, alternate, publish, ratio, spread

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' process measures, from the checkout
from showtell.captioning.config import SyntheticConfig  # noqa: E402
from showtell.captioning.data import synthetic  # noqa: E402
from showtell.common import processes  # noqa: E402
from tests.measure import free_ports  # noqa: E402


def run_cluster(data: Path, model_dir: Path, workers: int, steps: int, batch: int, log_every: int) -> float:
    """Train ``steps`` steps on a fresh cluster; mean examples/s per window after the first."""
    ports = free_ports(2 + workers)
    ps, chief, worker_hosts = f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}", \
        ",".join(f"127.0.0.1:{p}" for p in ports[2:])
    base = ["train", "--data", str(data), "--model-dir", str(model_dir),
            "--strategy", "parameter_server", "--ps-hosts", ps, "--worker-hosts", worker_hosts,
            "--chief-host", chief, "--batch-size", str(batch), "--optimizer", "adam", "--learning-rate",
            "3e-4", "--save-every-secs", "0", "--log-every-steps", str(log_every)]
    logs = model_dir.parent / f"{model_dir.name}-servers.log"
    servers = [processes.start([*base, "--job-name", "ps"], logs)]
    servers += [processes.start([*base, "--job-name", "worker", "--task-index", str(i)], logs)
                for i in range(workers)]
    try:
        chief_run = processes.run(*base, "--job-name", "chief", "--steps", str(steps), timeout=3600)
    finally:
        for proc in servers:
            processes.stop(proc)
    if chief_run.returncode != 0:
        raise SystemExit(chief_run.stderr[-3000:])
    rates = [float(r) for r in re.findall(r"loss \S+  lr \S+  (\S+) examples/s", chief_run.stderr)]
    settled = rates[1:]  # the first window includes the second worker's tracing
    return sum(settled) / len(settled)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16, help="per worker step")
    parser.add_argument("--log-every-steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    add_out(parser, "ps_cluster")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        synthetic.build(data, SyntheticConfig(train_images=400, val_images=8))
        runs = iter(range(1_000_000))

        def cluster(workers: int) -> float:
            return run_cluster(data, Path(tmp) / f"run-{next(runs)}", workers, args.steps, args.batch_size,
                               args.log_every_steps) / args.batch_size

        # No warm-up round: every cluster is new, and its first window (tracing) is not counted.
        steps_per_sec = alternate({"1_worker": lambda: cluster(1), "2_workers": lambda: cluster(2)},
                                  rounds=args.rounds, warm=0)
    publish({
        "batch_per_worker_step": args.batch_size,
        "steps_per_sec": {k: spread(v, 3) for k, v in steps_per_sec.items()},
        "ratio_2_over_1": ratio(steps_per_sec["2_workers"], steps_per_sec["1_worker"]),
    }, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
