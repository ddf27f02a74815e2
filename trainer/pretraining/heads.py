"""What pretraining fits: the synthetic scenes' labels (one softmax head per label on Inception
v3), the images and their augmented stream, the traced step, and the held-out accuracy it reports."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from showtell.captioning.config import InputConfig
from showtell.captioning.data import synthetic
from showtell.captioning.data.dataset import TRAIN, load_dataset, shard_files
from showtell.captioning.data.inputs import eval_images, one_pass, preprocess_image
from showtell.captioning.model.network import build_encoder
from showtell.common.errors import DataError

HELD_OUT = 0.1  # of the train split, to report accuracy on images the encoder did not fit
# What a head's loss weighs, by the attribute it names (others: 1).  The kinds' corners are a pixel
# or two at 75 px: weighted 3×, with order-free counts of each kind to help them start, they are
# learnt (900 steps: held-out kind accuracy 0.88/0.86/0.75 instead of ≈ 0.35, chance).  Weighting
# the colours 3× as well bought colours with kinds (at ≈ 900 steps colours 0.85/0.84/0.53, kinds
# 0.51/0.52/0.53; scenes with every head right 0.16 against 0.35): measured, and left at 1.
ATTRIBUTE_WEIGHTS = {"kind": 3.0}


HEADS = {**synthetic.LABEL_HEADS, **synthetic.COUNT_HEADS}


def head_weight(head: str) -> float:
    return ATTRIBUTE_WEIGHTS.get(head.rsplit("_", 1)[-1], 1.0) if head.startswith("shape") else 1.0


def train_images(data: Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Every train image once ([0, 1] floats, as stored) and its scene labels per head."""
    manifest, _ = load_dataset(data)
    if manifest.builder != synthetic.BUILDER:
        raise DataError(f"--data {data}: a {manifest.builder} dataset has no scene labels to pretrain "
                        "on; pretraining is for the synthetic dataset (for COCO pass "
                        "--inception-weights imagenet or a file)")
    seed = manifest.source["config"]["seed"]
    size = manifest.image_size
    images, ids = [], []
    # eval_images yields each image once, resized only (to its own size here: a no-op).
    for batch in eval_images(shard_files(data, TRAIN), size, 256):
        images.append((batch["image"].numpy() + 1.0) / 2.0)
        ids.extend(batch["image_id"].numpy().tolist())
    labels: dict[str, list[int]] = {head: [] for head in HEADS}
    for image_id in ids:
        split, index = synthetic.split_index(image_id)
        if split != "train":
            raise DataError(f"--data {data}: image {image_id} in the train shards is not a train image; "
                            "rebuild the dataset")
        scene = synthetic.make_scene(seed, split, index, size)
        for head, value in {**synthetic.scene_labels(scene), **synthetic.scene_counts(scene)}.items():
            labels[head].append(value)
    return np.concatenate(images), {head: np.asarray(v, np.int32) for head, v in labels.items()}


def classifier(image_size: int) -> tuple[keras.Model, keras.Model]:
    """Inception v3 (BN momentum 0.9: its statistics must keep up with weights moving from
    random init) with one softmax head per label."""
    encoder = build_encoder(image_size, bn_momentum=0.9)
    features = encoder.output
    heads = {head: keras.layers.Dense(len(classes), name=head)(features) for head, classes in HEADS.items()}
    return encoder, keras.Model(encoder.input, heads)


def fit_dataset(images: np.ndarray, labels: dict[str, np.ndarray], config: InputConfig,
                 batch_size: int, skip_steps: int = 0) -> tf.data.Dataset:
    """The images to fit, shuffled, augmented as the trainer's, batched, endlessly — from step
    ``skip_steps`` on.  Every choice is a function of the seed and the example's position in the
    stream (the order a seeded shuffle of indices, each augmentation seeded by its position), so
    skipping N steps' indices (cheap: no image is touched) gives exactly the batches N steps on."""
    size = images.shape[1]
    pictures, answers = tf.constant(images), {h: tf.constant(v) for h, v in labels.items()}
    order = tf.data.Dataset.range(len(images)).shuffle(len(images), seed=config.seed).repeat()
    stream = tf.data.Dataset.zip(order, tf.data.Dataset.counter()).skip(skip_steps * batch_size)

    def example(index: tf.Tensor, position: tf.Tensor):
        seed = tf.stack([tf.constant(config.seed, tf.int64), position])
        image = preprocess_image(tf.gather(pictures, index), size, True, config, seed=seed)
        return image, {h: tf.gather(v, index) for h, v in answers.items()}

    return (stream.map(example, num_parallel_calls=tf.data.AUTOTUNE)
            .batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE))


def make_train_step(model: keras.Model, optimizer: keras.Optimizer) -> Callable:
    """One step on every head (weighted by ``head_weight``), traced once."""
    # The slots made now, not inside the step: a tf.function that creates variables on its first
    # call traces twice, and tracing Inception's gradient costs ≈ 12 CPU-s (first step 25 → 13 s).
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function(autograph=False)
    def train_step(x, y):
        with tf.GradientTape() as tape:
            outputs = model(x, training=True)
            loss = tf.add_n([head_weight(h) * loss_fn(y[h], outputs[h])
                             for h in HEADS])
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return train_step


def held_out_accuracy(model: keras.Model, images: np.ndarray, labels: dict[str, np.ndarray], size: int,
              config: InputConfig) -> dict[str, float]:
    """Per-head accuracy (``LABEL_HEADS``) in inference mode — a frozen encoder's.  A shape head is
    scored on the images that have that shape: most scenes have no third shape, and "none" is
    learnt at once, so counting it would put chance for the third shape's kind at ≈ 0.8."""
    if not len(images):
        return {}
    plain = one_pass(tf.data.Dataset.from_tensor_slices(images).map(
        lambda image: preprocess_image(image, size, False, config)).batch(128))
    outputs = [model(x, training=False) for x in plain]
    accuracy = {}
    for head in synthetic.LABEL_HEADS:  # the counts only help: not reported
        predicted = np.concatenate([o[head].numpy().argmax(-1) for o in outputs])
        scored = labels[head] > 0 if head.startswith("shape") else np.ones_like(labels[head], bool)
        accuracy[head] = float(np.mean(predicted[scored] == labels[head][scored])) if scored.any() else 1.0
    return accuracy


def describe_accuracy(accuracy: dict[str, float]) -> str:
    """``layout 0.98, colour 0.95/0.91/0.90, kind …, size …`` (per shape, in reading order)."""
    if not accuracy:
        return "(nothing held out)"
    parts = [f"layout {accuracy['layout']:.2f}"]
    for attr in ("colour", "kind", "size"):
        values = [accuracy[f"shape{i}_{attr}"] for i in range(1, synthetic.MAX_SHAPES + 1)]
        parts.append(f"{attr} " + "/".join(f"{v:.2f}" for v in values))
    return ", ".join(parts)
