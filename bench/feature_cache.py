"""Phase-1 feature cache: how much faster is training on cached features, and is the cache build
bound by the encoder?

One run, 299 px images, the same batch size and model for both trainers (im2txt's 512/512
decoder, encoder frozen at the same pretrained weights):

* training examples/s on images (Inception forward in every step) vs. on the feature cache —
  goal: cache ÷ images ≥ 10;
* cache build rate (images/s after the first batch, which carries graph tracing) vs. a plain
  ``tf.function`` encoder forward pass over in-memory batches at the same size — goal ≥ 0.9.

Every figure is measured in the same alternating rounds (``rounds.py``; a warm-up round each not
counted, the order reversed every other round): each round times ``--image-steps`` steps on
images and ``--cache-steps`` on the cache (each on a fresh iterator), a whole cache build into a
new directory, and the plain forward pass; each ratio is the median of the per-round ratios.

    .venv/bin/python bench/feature_cache.py [--images 160] [--batch-size 32] [--image-steps 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf
from rounds import add_out, alternate, publish, ratio, spread

from showtell.captioning.config import CacheConfig, InputConfig, SyntheticConfig
from showtell.captioning.data import synthetic
from showtell.captioning.data.feature_cache import FeatureCache
from showtell.captioning.model.network import build_encoder
from showtell.captioning.weights.encoder import load_encoder_weights
from showtell.trainer.assembly import build_task
from showtell.trainer.config import OptimizerConfig
from showtell.trainer.experiment import Source, TrainExperiment
from showtell.trainer.step.task import CaptionTask
from showtell.trainer.trainer import open_data


def trainer(data: Path, model_dir: Path, weights: Path, batch_size: int, cache: bool) -> CaptionTask:
    t = build_task(TrainExperiment(
        source=Source(data=data, model_dir=model_dir, inception_weights=str(weights)),
        input=InputConfig(batch_size=batch_size),
        optimizer=OptimizerConfig(name="adam", learning_rate=3e-4, epochs_per_decay=0),
        cache=CacheConfig(enabled=cache)))
    load_encoder_weights(t.model.encoder, str(weights))  # as Trainer.run does in a new model dir
    return t


def training(t: CaptionTask, steps: int) -> Callable[[], float]:
    """Examples/s of ``steps`` steps per call, each on a fresh iterator dropped after it (a live
    one's prefetch would run during the other paths' rounds); its first batch is not timed."""
    dataset = t.dataset(open_data(t)[0])  # the cache, when used, is built here (untimed)
    step_fn = t.make_train_step(dataset.element_spec)

    def timed() -> float:
        batches = iter(dataset)
        first = next(batches)
        start = time.perf_counter()
        float(step_fn(first))
        for _ in range(steps - 1):
            float(step_fn(next(batches)))
        rate = steps * t.batch_size / (time.perf_counter() - start)
        del batches
        return rate

    return timed


def cache_build(t: CaptionTask, root: Path) -> Callable[[], float]:
    """Steady images/s (after the first batch's tracing) of a whole feature-cache build, into a
    new directory each call: a build timed in the rounds, beside the forward pass it is held to."""
    calls = itertools.count()
    config = CacheConfig()

    def timed() -> float:
        where = root / f"build-{next(calls)}"
        stats = FeatureCache(where, {"variants": config.variants}).build(
            lambda images: t.model.features(images, training=False), t.files, t.model_config.image_size,
            t.input_config, config.batch_size)
        shutil.rmtree(where)
        return stats.steady_images_per_sec

    return timed


def plain_forward(t: CaptionTask, image_size: int, batch_size: int, batches: int) -> Callable[[], float]:
    images = tf.random.uniform([batch_size, image_size, image_size, 3], -1.0, 1.0)
    forward = tf.function(lambda x: t.model.features(x, training=False))

    def timed() -> float:
        start = time.perf_counter()
        for _ in range(batches):
            forward(images).numpy()
        return batches * batch_size / (time.perf_counter() - start)

    return timed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=160, help="training images to cache")
    parser.add_argument("--image-size", type=int, default=299)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--image-steps", type=int, default=8, help="timed steps on images per round")
    parser.add_argument("--cache-steps", type=int, default=100, help="timed steps on the cache per round")
    parser.add_argument("--rounds", type=int, default=3)
    add_out(parser, "feature_cache")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    with tempfile.TemporaryDirectory() as tmp:
        data, weights = Path(tmp) / "data", Path(tmp) / "inception.weights.h5"
        synthetic.build(data, SyntheticConfig(train_images=args.images, val_images=8,
                                              image_size=args.image_size, train_shards=2))
        build_encoder(args.image_size).save_weights(str(weights))

        on_images = trainer(data, Path(tmp) / "images", weights, args.batch_size, cache=False)
        on_cache = trainer(data, Path(tmp) / "cached", weights, args.batch_size, cache=True)
        cache_batch = CacheConfig().batch_size
        rates = alternate({
            "images": training(on_images, args.image_steps),
            "cache": training(on_cache, args.cache_steps),
            "build": cache_build(on_images, Path(tmp) / "builds"),
            "forward": plain_forward(on_images, args.image_size, cache_batch,
                                     max(2, args.images // cache_batch)),
        }, rounds=args.rounds, warm=1)

    result = {
        "image_size": args.image_size,
        "batch_size": args.batch_size,
        "train_examples_per_sec_images": spread(rates["images"], 2),
        "train_examples_per_sec_cache": spread(rates["cache"], 1),
        "train_ratio_cache_over_images": ratio(rates["cache"], rates["images"], 1),
        "cache_build_images": args.images,
        "cache_build_images_per_sec_steady": spread(rates["build"], 2),
        "plain_forward_images_per_sec": spread(rates["forward"], 2),
        # Each round builds a whole cache anew: its steady rate against that round's forward pass.
        "build_ratio_steady_over_forward": ratio(rates["build"], rates["forward"]),
    }
    publish(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
