"""Input-pipeline efficiency: does training ever wait for tf.data?

Measures, in one run, training examples/sec fed by the real TFRecord pipeline (parallel
interleave, shuffle, parallel decode + augmentation, padding, prefetch) and fed by the
same pipeline's first k batches cached in memory (``take(k).cache().repeat()``), in
alternating rounds (``rounds.py``).  Each round opens a fresh iterator and drops it after its
steps: an idle iterator's prefetch threads would otherwise go on decoding during the other
source's round and take CPU from it.  Prints the median of the per-round ratios pipeline ÷
in-memory with its spread (goal ≥ 0.95: the pipeline keeps the model busy).

    .venv/bin/python bench/input_pipeline.py [--rounds 5] [--steps 25] [--batch-size 32]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from rounds import add_out, alternate, publish, ratio, spread

from showtell.captioning.config import InputConfig, SyntheticConfig
from showtell.captioning.data import synthetic
from showtell.trainer.assembly import build_task
from showtell.trainer.config import OptimizerConfig
from showtell.trainer.experiment import Source, TrainExperiment
from showtell.trainer.trainer import open_data


def examples_per_sec(step_fn, dataset, steps: int, batch_size: int) -> float:
    """``steps`` training steps on a fresh iterator (its first batch untimed: the pipeline's start),
    fetching each batch as the trainer does; the iterator is gone when this returns."""
    iterator = iter(dataset)
    float(step_fn(next(iterator)))
    start = time.perf_counter()
    for _ in range(steps):
        float(step_fn(next(iterator)))
    seconds = time.perf_counter() - start
    del iterator
    return steps * batch_size / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="dataset dir (default: build a synthetic one)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=25, help="steps per round and source")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--cached-batches", type=int, default=20)
    add_out(parser, "input_pipeline")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    with tempfile.TemporaryDirectory() as tmp:
        data = args.data or Path(tmp) / "data"
        if args.data is None:
            synthetic.build(data, SyntheticConfig())
        trainer = build_task(TrainExperiment(
            source=Source(data=data, model_dir=Path(tmp) / "model"),
            input=InputConfig(batch_size=args.batch_size),
            optimizer=OptimizerConfig(name="adam", learning_rate=1e-3, epochs_per_decay=0)))
        cache, _ = open_data(trainer)
        strategy = trainer.strategy
        pipeline = strategy.experimental_distribute_dataset(trainer.dataset(cache))
        cached = strategy.experimental_distribute_dataset(
            trainer.dataset(cache).take(args.cached_batches).cache().repeat())
        step_fn = trainer.make_train_step(pipeline.element_spec)
        rates = alternate({
            "pipeline": lambda: examples_per_sec(step_fn, pipeline, args.steps, args.batch_size),
            # A cache is filled by its first full pass: each round's iterator starts from it.
            "in_memory": lambda: examples_per_sec(step_fn, cached, args.steps, args.batch_size),
        }, rounds=args.rounds, warm=1)
    result = {
        "examples_per_sec": {k: spread(v, 1) for k, v in rates.items()},
        "ratio_pipeline_over_in_memory": ratio(rates["pipeline"], rates["in_memory"]),
        "goal": 0.95,
        "batch_size": args.batch_size,
        "image_size": trainer.model_config.image_size,
        "steps_per_round": args.steps,
    }
    publish(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
