"""How fast ``showtell pretrain``'s encoder learns the synthetic shapes' kinds, per variant of its
heads: held-out accuracy per head every ``--every`` steps, as JSON lines.

    .venv/bin/python bench/pretrain_heads.py --steps 900                       # equal weights, 10 heads
    .venv/bin/python bench/pretrain_heads.py --steps 900 --counts 1 --kind-weight 3   # showtell's
    .venv/bin/python bench/pretrain_heads.py --steps 900 --counts 1 --kind-weight 3 --colour-weight 3

Kind, colour and size are scored on the held-out images that have that shape (the "none" class
is learnt at once and would hide chance).  Builds the synthetic dataset under --data if missing.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import tensorflow as tf

from showtell.captioning.config import InputConfig, SyntheticConfig
from showtell.captioning.data import synthetic
from showtell.captioning.data.inputs import preprocess_image
from showtell.captioning.model.network import build_encoder
from showtell.trainer.pretraining import heads as pretrain


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("/tmp/showtell-bench/synthetic"))
    ap.add_argument("--steps", type=int, default=900)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--kind-weight", type=float, default=1.0, help="weight of the per-shape kind heads")
    ap.add_argument("--counts", type=float, default=0.0, help="weight of the kind-count heads (0: none)")
    ap.add_argument("--colour-counts", type=float, default=0.0,
                    help="weight of heads counting each colour (0: none)")
    ap.add_argument("--colour-weight", type=float, default=1.0, help="weight of the per-shape colour heads")
    ap.add_argument("--pair-counts", type=float, default=0.0,
                    help="weight of heads counting the shapes of each colour and kind, e.g. red circles "
                         "(0: none)")
    ap.add_argument("--px", type=int, default=0, help="resize the input to this size (0: as stored)")
    a = ap.parse_args()
    if not (a.data / "dataset.json").is_file():
        synthetic.build(a.data, SyntheticConfig())
    keras.utils.set_random_seed(0)
    images, labels = pretrain.train_images(a.data)  # every head, the counts included
    colour_heads = {f"{c}s": tuple(range(synthetic.MAX_SHAPES + 1)) for c in synthetic.COLOURS}
    if a.colour_counts:  # from the colour heads: how many shapes of each colour
        for i, colour in enumerate(synthetic.COLOURS, start=1):
            labels[f"{colour}s"] = sum((labels[f"shape{k}_colour"] == i).astype("int32")
                                       for k in range(1, synthetic.MAX_SHAPES + 1))
    pair_heads = {f"{c}_{k}s": tuple(range(synthetic.MAX_SHAPES + 1)) for c in synthetic.COLOURS
                  for k in synthetic.KINDS}
    if a.pair_counts:  # from the per-shape heads: how many shapes of each colour and kind
        for c, colour in enumerate(synthetic.COLOURS, start=1):
            for k, kind in enumerate(synthetic.KINDS, start=1):
                labels[f"{colour}_{kind}s"] = sum(
                    ((labels[f"shape{i}_colour"] == c) & (labels[f"shape{i}_kind"] == k)).astype("int32")
                    for i in range(1, synthetic.MAX_SHAPES + 1))
    n_fit = round(len(images) * (1 - pretrain.HELD_OUT))
    size = a.px or images.shape[1]
    heads = dict(synthetic.LABEL_HEADS, **(synthetic.COUNT_HEADS if a.counts else {}),
                 **(colour_heads if a.colour_counts else {}), **(pair_heads if a.pair_counts else {}))
    weight = {h: a.counts if h in synthetic.COUNT_HEADS else a.colour_counts if h in colour_heads
              else a.pair_counts if h in pair_heads else a.kind_weight if h.endswith("_kind")
              else a.colour_weight if h.endswith("_colour") else 1.0 for h in heads}
    encoder = build_encoder(size, bn_momentum=0.9)
    outputs = {h: keras.layers.Dense(len(c), name=h)(encoder.output) for h, c in heads.items()}
    model = keras.Model(encoder.input, outputs)
    config = InputConfig(seed=0)
    fit = tf.data.Dataset.from_tensor_slices((images[:n_fit], {h: labels[h][:n_fit] for h in heads}))
    fit = (fit.shuffle(n_fit, seed=0).repeat()
           .map(lambda i, y: (preprocess_image(i, size, True, config), y),
                num_parallel_calls=tf.data.AUTOTUNE)
           .batch(a.batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE))
    optimizer = keras.optimizers.Adam(a.lr)
    optimizer.build(model.trainable_variables)  # as trainer/pretraining/pretrain.py: the step traces once
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            out = model(x, training=True)
            loss = tf.add_n([weight[h] * loss_fn(y[h], out[h]) for h in heads])
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    held = {h: v[n_fit:] for h, v in labels.items()}
    start = time.monotonic()
    for n, (x, y) in enumerate(fit, start=1):
        loss = float(step(x, y))
        if n % a.every == 0:
            accuracy = pretrain.held_out_accuracy(model, images[n_fit:], held, size, config)
            print(json.dumps({"step": n, "seconds": round(time.monotonic() - start), "loss": round(loss, 3),
                              **{h: round(v, 2) for h, v in accuracy.items()}}), flush=True)
        if n >= a.steps:
            break


if __name__ == "__main__":
    main()
