"""The Show-and-Tell network: gradients reach every part; inference steps match training."""

from __future__ import annotations

import itertools
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from showtell.captioning.config import InputConfig, ModelConfig
from showtell.captioning.data import inputs
from showtell.captioning.data.dataset import load_dataset, shard_files
from showtell.captioning.model.network import build_model, masked_loss_sum


def _one_batch(data: Path, size: int = 4) -> dict[str, tf.Tensor]:
    ds = inputs.train_dataset(shard_files(data, "train"), 75, InputConfig(batch_size=size, seed=0))
    return next(iter(ds))


def _distinct_image_batch(data: Path, size: int = 4) -> dict[str, tf.Tensor]:
    """One caption for each of ``size`` different images: a batch that can be fit exactly.

    (Two captions of one image in a batch leave an irreducible loss floor.)
    """
    batch = next(iter(inputs.eval_images(shard_files(data, "train"), 75, batch_size=size)))
    pairs = inputs.teacher_forcing(batch["captions"][:, :1])  # each image's first caption
    return {"image": batch["image"], **{k: pairs[k] for k in ("input_ids", "target_ids", "mask")}}


@pytest.mark.slow
def test_overfits_one_batch_and_trains_the_encoder(tiny_data: Path):
    manifest, _ = load_dataset(tiny_data)
    keras.utils.set_random_seed(0)
    config = ModelConfig(vocab_size=manifest.vocab_size, image_size=75, embedding_size=32, lstm_units=32,
                         image_dropout=0.0, lstm_dropout=0.0)
    model = build_model(config)
    optimizer = keras.optimizers.Adam(0.03)  # ≈ 30 steps to a tenth here (0.01: ≈ 75)
    optimizer.build(model.trainable_variables)  # slots made outside the step: it traces once, not twice
    batch = _distinct_image_batch(tiny_data)
    # the first convolution (Keras numbers layer names per process, so find it by type)
    conv = next(layer for layer in model.encoder.layers if isinstance(layer, keras.layers.Conv2D)).kernel
    conv_before = conv.numpy().copy()
    embed_before = model.word_embedding.embeddings.numpy().copy()

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            logits = model((batch["image"], batch["input_ids"]), training=True)
            loss_sum, words = masked_loss_sum(logits, batch["target_ids"], batch["mask"])
            loss = loss_sum / words
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    losses: list[float] = []
    for _ in range(100):  # until the loss is a tenth of where it started, at most 100 steps
        losses.append(float(step()))
        if losses[-1] < 0.1 * losses[0]:
            break
    assert losses[0] > 2.0  # about log(vocab) at the start
    assert losses[-1] < 0.1 * losses[0], losses[::10]
    assert not np.allclose(conv.numpy(), conv_before)  # gradients reached Inception's first conv
    assert not np.allclose(model.word_embedding.embeddings.numpy(), embed_before)


def test_masked_loss_ignores_padding():
    logits = tf.random.normal([2, 3, 5])
    targets = tf.constant([[1, 2, 3], [4, 0, 0]])
    mask = tf.constant([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    total, words = masked_loss_sum(logits, targets, mask)
    other = tf.constant([[1, 2, 3], [4, 3, 2]])  # different padding targets, same loss
    total2, _ = masked_loss_sum(logits, other, mask)
    assert float(words) == 4.0
    np.testing.assert_allclose(float(total), float(total2), rtol=1e-6)
    # and it is the cross-entropy of the four real words (a loss of 0 would pass the lines above)
    real = [(0, 0, 1), (0, 1, 2), (0, 2, 3), (1, 0, 4)]
    expected = -sum(float(tf.nn.log_softmax(logits[b, t])[w]) for b, t, w in real)
    np.testing.assert_allclose(float(total), expected, rtol=1e-5)
    assert expected > 0


def test_step_by_step_inference_matches_teacher_forcing(tiny_data: Path):
    manifest, _ = load_dataset(tiny_data)
    config = ModelConfig(vocab_size=manifest.vocab_size, image_size=75, embedding_size=16, lstm_units=24)
    model = build_model(config)
    batch = _one_batch(tiny_data, size=2)
    full = tf.nn.log_softmax(model((batch["image"], batch["input_ids"]), training=False))
    state = model.initial_state(batch["image"])
    for t in itertools.islice(range(batch["input_ids"].shape[1]), 5):
        step_logp, state = model.step(batch["input_ids"][:, t], state)
        np.testing.assert_allclose(step_logp.numpy(), full[:, t].numpy(), atol=1e-4)
