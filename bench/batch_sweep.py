"""Batch size against throughput *and* time to accuracy, on the demo's data and recipe: one encoder
pretrained once (``showtell pretrain``), then for each batch size a phase-1 trainer for the same
``--seconds`` with an evaluator beside it (policy all, every checkpoint; the demo's evaluator
settings), as ``make demo`` runs them.  Each evaluation carries the run's training seconds at its
checkpoint (saved by the trainer in the checkpoint), so the time to a target is read from the
records, not from file times.

Prints, per batch size: examples/s (the trainer's logged windows after the first, time-weighted),
its best exact match, the training seconds to exact match ``--target`` and to the highest target
every batch size reached (rounded down to 0.05).  One run each, in the order given (a shared
machine drifts: read differences of a few percent as noise).  The feature cache is built before
the first (untimed), so no batch size pays for it.

    .venv/bin/python bench/batch_sweep.py [--batches 8,16,32,64] [--seconds 150] [--pretrain 240]
        [--target 0.4]
"""

from __future__ import annotations

import argparse
import math
import subprocess
import tempfile
from pathlib import Path

from demo_overhead import ROOT, trainer_rate
from rounds import add_out, publish

from showtell.commands.demo.settings import ENCODER_FILE, TRAIN_FLAGS
from showtell.common import processes
from showtell.evaluator.records.store import Store


def showtell(*args: str, log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen([*processes.command(), *args], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)


def finish(proc: subprocess.Popen, log: Path, timeout: float) -> None:
    if proc.wait(timeout=timeout) != 0:
        raise SystemExit(f"{' '.join(map(str, proc.args[-6:]))}: exit {proc.returncode}\n"
                         f"{log.read_text()[-3000:]}")


def flags(batch: int) -> list[str]:
    at = TRAIN_FLAGS.index("--batch-size")
    return [*TRAIN_FLAGS[:at], "--batch-size", str(batch), *TRAIN_FLAGS[at + 2:]]


def one_batch(tmp: Path, data: Path, encoder: Path, batch: int, seconds: float) -> dict:
    model, work = tmp / f"model-{batch}", tmp / f"work-{batch}"
    evaluator = showtell("evaluate", "--model-dir", str(model), "--data", str(data), "--work-dir", str(work),
                         "--port", "0", "--policy", "all", "--meteor", "false", "--max-eval-examples", "200",
                         "--beam-size", "1", "--threads", "1", "--exit-when-trained",
                         log=tmp / f"evaluator-{batch}.log")
    trainer_log = tmp / f"trainer-{batch}.log"
    trainer = showtell("train", "--data", str(data), "--model-dir", str(model), *flags(batch),
                       "--inception-weights", str(encoder), "--max-seconds", str(seconds),
                       "--save-every-secs", "15", log=trainer_log)
    finish(trainer, trainer_log, seconds + 600)
    finish(evaluator, tmp / f"evaluator-{batch}.log", 600)
    store = Store(work / "evaluations.sqlite")
    curve = [(r.train_seconds, r.metrics["exact_match"], r.step) for r in store.after(-1) if r.status == "ok"]
    store.close()
    return {"examples_per_sec": round(trainer_rate(trainer_log.read_text()), 1),
            "evaluations": len(curve), "best_exact_match": max((e for _, e, _ in curve), default=None),
            "curve": [[round(s, 1), round(e, 3), step] for s, e, step in curve]}


def seconds_to(curve: list[list], target: float) -> float | None:
    return next((s for s, e, _ in curve if e >= target), None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="8,16,32,64")
    parser.add_argument("--seconds", type=float, default=150.0, help="phase-1 training per batch size")
    parser.add_argument("--pretrain", type=float, default=240.0, help="seconds of encoder pretraining, once")
    parser.add_argument("--target", type=float, default=0.4)
    add_out(parser, "batch_sweep")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        data, encoder = tmp / "data", tmp / ENCODER_FILE
        subprocess.run([*processes.command(), "data", "synthetic", "--out", str(data)], check=True,
                       capture_output=True, cwd=ROOT)
        finish(showtell("pretrain", "--data", str(data), "--out", str(encoder),
                        "--seconds", str(args.pretrain), log=tmp / "pretrain.log"),
               tmp / "pretrain.log", args.pretrain + 600)
        # The feature cache, once, untimed: a one-step run in a scratch model dir builds it.
        finish(showtell("train", "--data", str(data), "--model-dir", str(tmp / "scratch"), *flags(32),
                        "--inception-weights", str(encoder), "--steps", "1", log=tmp / "cache.log"),
               tmp / "cache.log", 900)
        results = {b: one_batch(tmp, data, encoder, b, args.seconds) for b in batches}
    common = min(r["best_exact_match"] or 0.0 for r in results.values())
    common = math.floor(common * 20) / 20
    for r in results.values():
        r[f"seconds_to_exact_match_{args.target:g}"] = seconds_to(r["curve"], args.target)
        r[f"seconds_to_exact_match_{common:g}"] = seconds_to(r["curve"], common)
    publish({"seconds_each": args.seconds, "pretrain_seconds": args.pretrain, "target": args.target,
             "highest_target_all_reached": common, "by_batch": results}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
