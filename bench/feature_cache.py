"""Phase-1 feature cache: how much faster is training on cached features, and is the cache build
bound by the encoder?

One run, 299 px images, the same batch size and model for both trainers (im2txt's 512/512
decoder, encoder frozen at the same pretrained weights):

* training examples/s on images (Inception forward in every step) vs. on the feature cache —
  goal: cache ÷ images ≥ 10;
* cache build rate (images/s after the first batch, which carries graph tracing) vs. a plain
  ``tf.function`` encoder forward pass over in-memory batches at the same size — goal ≥ 0.9.

    .venv/bin/python bench/feature_cache.py [--images 160] [--batch-size 32] [--image-steps 4]
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

import tensorflow as tf

from showtell.captioning.config import (
    CacheConfig,
    InputConfig,
    ModelConfig,
    OptimizerConfig,
    SyntheticConfig,
    TrainConfig,
)
from showtell.captioning.data import synthetic
from showtell.captioning.model.network import build_encoder
from showtell.captioning.weights.encoder import load_encoder_weights
from showtell.trainer.task import CaptionTask


def trainer(data: Path, model_dir: Path, weights: Path, batch_size: int, cache: bool) -> CaptionTask:
    t = CaptionTask(data_dir=data, model_dir=model_dir, model=ModelConfig(),
                    input_config=InputConfig(batch_size=batch_size),
                    optimizer=OptimizerConfig(name="adam", learning_rate=3e-4, epochs_per_decay=0),
                    train=TrainConfig(), inception_weights=str(weights), cache=CacheConfig(enabled=cache))
    load_encoder_weights(t.model.encoder, str(weights))  # as Trainer.run does in a new model dir
    return t


def examples_per_sec(t: CaptionTask, steps: int) -> float:
    dataset = t.dataset()
    step_fn = t.make_train_step(dataset.element_spec)
    batches = iter(dataset)
    float(step_fn(next(batches)))  # trace
    start = time.perf_counter()
    for _ in range(steps):
        float(step_fn(next(batches)))
    return steps * t.batch_size / (time.perf_counter() - start)


def plain_forward_rate(t: CaptionTask, image_size: int, batch_size: int, batches: int) -> float:
    images = tf.random.uniform([batch_size, image_size, image_size, 3], -1.0, 1.0)
    forward = tf.function(lambda x: t.model.features(x, training=False))
    forward(images).numpy()  # trace
    start = time.perf_counter()
    for _ in range(batches):
        forward(images).numpy()
    return batches * batch_size / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=160, help="training images to cache")
    parser.add_argument("--image-size", type=int, default=299)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--image-steps", type=int, default=4, help="timed steps on images")
    parser.add_argument("--cache-steps", type=int, default=200, help="timed steps on the cache")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    with tempfile.TemporaryDirectory() as tmp:
        data, weights = Path(tmp) / "data", Path(tmp) / "inception.weights.h5"
        synthetic.build(data, SyntheticConfig(train_images=args.images, val_images=8,
                                              image_size=args.image_size, train_shards=2))
        build_encoder(args.image_size).save_weights(str(weights))

        on_images = trainer(data, Path(tmp) / "images", weights, args.batch_size, cache=False)
        images_rate = examples_per_sec(on_images, args.image_steps)
        forward_rate = plain_forward_rate(on_images, args.image_size, CacheConfig().batch_size,
                                          max(2, args.images // CacheConfig().batch_size))

        on_cache = trainer(data, Path(tmp) / "cached", weights, args.batch_size, cache=True)
        cache_rate = examples_per_sec(on_cache, args.cache_steps)  # builds the cache first
        build = on_cache.cache_build

    result = {
        "image_size": args.image_size,
        "batch_size": args.batch_size,
        "train_examples_per_sec_images": round(images_rate, 2),
        "train_examples_per_sec_cache": round(cache_rate, 1),
        "train_ratio_cache_over_images": round(cache_rate / images_rate, 1),
        "cache_build_images": build.images,
        "cache_build_seconds": round(build.seconds, 1),
        "cache_build_images_per_sec_overall": round(build.images_per_sec, 2),
        "cache_build_images_per_sec_steady": round(build.steady_images_per_sec, 2),
        "plain_forward_images_per_sec": round(forward_rate, 2),
        "build_ratio_steady_over_forward": round(build.steady_images_per_sec / forward_rate, 3),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
