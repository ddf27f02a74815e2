"""Strategy overhead on this CPU: training examples/s under ``one_device``, ``mirrored`` with one
replica, and ``mirrored`` over 2 logical CPUs — one process, same model, same per-replica batch,
alternating rounds so machine noise hits all three.  And the GPU speed levers on one device:
``--mixed-precision bf16`` / ``fp16`` and ``--jit-compile`` against float32 (``--device GPU:0``
on a GPU host; here the CPU, where they are not expected to pay).

A warm-up round per configuration is run first and not counted.
Prints mirrored(1) ÷ one_device (goal ≥ 0.95: the strategy machinery costs little),
mirrored(2 logical) ÷ mirrored(1) (this machine has 2 cores; logical CPUs share them, so this
shows the cost of towers, not GPU scaling), and each lever ÷ float32: each the median of the
per-round ratios with its spread, and whether 1.0 lies inside it (then this run cannot tell
the two apart).

    .venv/bin/python bench/strategies.py [--rounds 5] [--steps 12] [--batch-size 32] [--device GPU:0]
        [--only strategies|levers]
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from rounds import add_out, alternate, publish, ratio, spread

from showtell.trainer.distribution.placement import configure_devices

configure_devices(2)

import tensorflow as tf  # noqa: E402

from showtell.captioning.config import InputConfig, SyntheticConfig  # noqa: E402
from showtell.captioning.data import synthetic  # noqa: E402
from showtell.trainer.assembly import build_task  # noqa: E402
from showtell.trainer.config import ComputeConfig, OptimizerConfig  # noqa: E402
from showtell.trainer.experiment import Source, TrainExperiment  # noqa: E402
from showtell.trainer.trainer import open_data  # noqa: E402


def runner(data: Path, model_dir: Path, strategy: tf.distribute.Strategy, batch: int,
           compute: ComputeConfig | None = None):
    trainer = build_task(TrainExperiment(
        source=Source(data=data, model_dir=model_dir), input=InputConfig(batch_size=batch),
        optimizer=OptimizerConfig(name="adam", learning_rate=3e-4, epochs_per_decay=0),
        compute=compute or ComputeConfig()), strategy)
    dist = strategy.experimental_distribute_dataset(trainer.dataset(open_data(trainer)[0]))
    step = trainer.make_train_step(dist.element_spec)
    float(step(next(iter(dist))))  # trace

    def timed(steps: int) -> float:
        """A fresh iterator per round, dropped after it: a live one's prefetch would run during the
        other configurations' rounds.  Its first batch (the shuffle buffer filling) is not timed."""
        batches = iter(dist)
        first = next(batches)
        start = time.perf_counter()
        float(step(first))
        for _ in range(steps - 1):
            float(step(next(batches)))
        rate = steps * trainer.batch_size / (time.perf_counter() - start)
        del batches
        return rate

    return timed


LEVERS = {"float32": ComputeConfig(), "bf16": ComputeConfig(mixed_precision="bf16"),
          "fp16": ComputeConfig(mixed_precision="fp16"), "xla": ComputeConfig(jit_compile=True)}


def measure(runners: dict, rounds: int, steps: int) -> dict[str, list[float]]:
    """A warm-up round each (tf.data autotuning settles), then alternated rounds (``rounds.py``)."""
    return alternate({name: (lambda timed=timed: timed(steps)) for name, timed in runners.items()},
                     rounds=rounds, warm=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32, help="per replica")
    parser.add_argument("--device", help="the levers' device (default: the first CPU)")
    parser.add_argument("--only", choices=("strategies", "levers"))
    parser.add_argument("--levers", help="which besides float32 (default on a GPU: bf16,fp16,xla; on a CPU "
                                         "bf16,xla — float16 kernels on a CPU are too slow to finish)")
    add_out(parser, "strategies")
    args = parser.parse_args()
    if args.levers is None:
        args.levers = "bf16,fp16,xla" if args.device and "GPU" in args.device.upper() else "bf16,xla"
    logging.basicConfig(level=logging.WARNING)
    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    report: dict[str, object] = {"batch_per_replica": args.batch_size}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        synthetic.build(data, SyntheticConfig(train_images=600, val_images=8))
        if args.only != "levers":
            strategies = {
                "one_device": tf.distribute.OneDeviceStrategy(cpus[0]),
                "mirrored_1": tf.distribute.MirroredStrategy(cpus[:1]),
                "mirrored_2_logical": tf.distribute.MirroredStrategy(cpus[:2]),
            }
            rates = measure({name: runner(data, Path(tmp) / name, strategy, args.batch_size)
                             for name, strategy in strategies.items()}, args.rounds, args.steps)
            report["strategies"] = {
                "examples_per_sec": {k: spread(v, 1) for k, v in rates.items()},
                "mirrored_1_over_one_device": ratio(rates["mirrored_1"], rates["one_device"]),
                "mirrored_2_logical_over_mirrored_1": ratio(rates["mirrored_2_logical"], rates["mirrored_1"]),
            }
        if args.only != "strategies":
            device = args.device or cpus[0]
            rates = measure({name: runner(data, Path(tmp) / f"lever-{name}",
                                          tf.distribute.OneDeviceStrategy(device), args.batch_size, compute)
                             for name, compute in LEVERS.items()
                             if name == "float32" or name in args.levers.split(",")}, args.rounds, args.steps)
            report["levers"] = {
                "device": device,
                "examples_per_sec": {k: spread(v, 1) for k, v in rates.items()},
                "over_float32": {k: ratio(v, rates["float32"]) for k, v in rates.items() if k != "float32"},
            }
    publish(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
