"""Input-pipeline efficiency: does training ever wait for tf.data?

Measures, in one run, training examples/sec fed by the real TFRecord pipeline (parallel
interleave, shuffle, parallel decode + augmentation, padding, prefetch) and fed by the
same pipeline's first k batches cached in memory (``take(k).cache().repeat()``), in
alternating rounds so machine noise hits both.  Prints the ratio pipeline ÷ in-memory
(goal ≥ 0.95: the pipeline keeps the model busy).

    .venv/bin/python bench/input_pipeline.py [--rounds 4] [--steps 25] [--batch-size 32]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from showtell.captioning.config import InputConfig, ModelConfig, OptimizerConfig, SyntheticConfig, TrainConfig
from showtell.captioning.data import synthetic
from showtell.trainer.task import CaptionTask


def timed_steps(step_fn, iterator, steps: int) -> float:
    """Seconds for ``steps`` training steps, fetching each batch as the trainer does."""
    start = time.perf_counter()
    for _ in range(steps):
        float(step_fn(next(iterator)))
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="dataset dir (default: build a synthetic one)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=25, help="steps per round and source")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--cached-batches", type=int, default=20)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    with tempfile.TemporaryDirectory() as tmp:
        data = args.data or Path(tmp) / "data"
        if args.data is None:
            synthetic.build(data, SyntheticConfig())
        trainer = CaptionTask(
            data_dir=data, model_dir=Path(tmp) / "model", model=ModelConfig(),
            input_config=InputConfig(batch_size=args.batch_size),
            optimizer=OptimizerConfig(name="adam", learning_rate=1e-3, epochs_per_decay=0),
            train=TrainConfig(),
        )
        strategy = trainer.strategy
        pipeline = trainer.dataset()
        cached = pipeline.take(args.cached_batches).cache().repeat()
        step_fn = trainer.make_train_step(strategy.experimental_distribute_dataset(pipeline).element_spec)
        sources = {
            "pipeline": iter(strategy.experimental_distribute_dataset(pipeline)),
            "in_memory": iter(strategy.experimental_distribute_dataset(cached)),
        }
        for it in sources.values():  # trace once, fill the cache, warm the prefetch buffers
            timed_steps(step_fn, it, args.cached_batches)
        seconds = {name: 0.0 for name in sources}
        for _ in range(args.rounds):
            for name, it in sources.items():
                seconds[name] += timed_steps(step_fn, it, args.steps)
    examples = args.rounds * args.steps * args.batch_size
    rate = {name: examples / s for name, s in seconds.items()}
    result = {
        "examples_per_sec": {k: round(v, 1) for k, v in rate.items()},
        "ratio_pipeline_over_in_memory": round(rate["pipeline"] / rate["in_memory"], 3),
        "goal": 0.95,
        "batch_size": args.batch_size,
        "image_size": trainer.model_config.image_size,
        "steps_per_source": args.rounds * args.steps,
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
