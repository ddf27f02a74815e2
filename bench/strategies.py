"""Strategy overhead on this CPU: training examples/s under ``one_device``, ``mirrored`` with one
replica, and ``mirrored`` over 2 logical CPUs — one process, same model, same per-replica batch,
alternating rounds so machine noise hits all three.

A warm-up round per strategy is run first and not counted.
Prints mirrored(1) ÷ one_device (goal ≥ 0.95: the strategy machinery costs little) and
mirrored(2 logical) ÷ mirrored(1) (this machine has 2 cores; logical CPUs share them, so this
shows the cost of towers, not GPU scaling).

    .venv/bin/python bench/strategies.py [--rounds 3] [--steps 12] [--batch-size 32]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from showtell.trainer.strategy import configure_devices

configure_devices(2)

import tensorflow as tf  # noqa: E402

from showtell.captioning.config import InputConfig, ModelConfig, OptimizerConfig, SyntheticConfig, TrainConfig  # noqa: E402
from showtell.captioning.data import synthetic  # noqa: E402
from showtell.trainer.task import CaptionTask  # noqa: E402


def runner(data: Path, model_dir: Path, strategy: tf.distribute.Strategy, batch: int):
    trainer = CaptionTask(data_dir=data, model_dir=model_dir, model=ModelConfig(),
                          input_config=InputConfig(batch_size=batch),
                          optimizer=OptimizerConfig(name="adam", learning_rate=3e-4, epochs_per_decay=0),
                          train=TrainConfig(), strategy=strategy)
    dist = strategy.experimental_distribute_dataset(trainer.dataset())
    step = trainer.make_train_step(dist.element_spec)
    batches = iter(dist)
    float(step(next(batches)))  # trace

    def timed(steps: int) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            float(step(next(batches)))
        return steps * trainer.batch_size / (time.perf_counter() - start)

    return timed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32, help="per replica")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        synthetic.build(data, SyntheticConfig(train_images=600, val_images=8))
        strategies = {
            "one_device": tf.distribute.OneDeviceStrategy(cpus[0]),
            "mirrored_1": tf.distribute.MirroredStrategy(cpus[:1]),
            "mirrored_2_logical": tf.distribute.MirroredStrategy(cpus[:2]),
        }
        runners = {name: runner(data, Path(tmp) / name, strategy, args.batch_size)
                   for name, strategy in strategies.items()}
        for timed in runners.values():  # warm-up round, not counted (tf.data autotuning settles)
            timed(args.steps)
        rates: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(args.rounds):
            for name, timed in runners.items():
                rates[name].append(timed(args.steps))
    mean = {name: sum(r) / len(r) for name, r in rates.items()}
    print(json.dumps({
        "batch_per_replica": args.batch_size,
        "examples_per_sec": {k: round(v, 1) for k, v in mean.items()},
        "per_round": {k: [round(x, 1) for x in v] for k, v in rates.items()},
        "mirrored_1_over_one_device": round(mean["mirrored_1"] / mean["one_device"], 3),
        "mirrored_2_logical_over_mirrored_1": round(mean["mirrored_2_logical"] / mean["mirrored_1"], 3),
    }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
