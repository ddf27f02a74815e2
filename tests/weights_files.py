"""Pretrained-weight files the tests write themselves (nothing can be downloaded here).

* ``.weights.h5``: Keras 3's own ``save_weights`` of ``InceptionV3(include_top=False)``.
* ``.h5``: the Keras 2 layout of the published ``…_notop.h5`` (one group per layer listed in the
  ``layer_names`` attribute, ``weight_names`` like ``conv2d_1/kernel:0``), written with h5py.
* slim: ``slim_reference.save_slim_checkpoint``.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import keras
import numpy as np

from showtell.captioning.model.network import build_encoder


def random_encoder(image_size: int = 75, seed: int = 0) -> keras.Model:
    """An Inception v3 whose every tensor — BN statistics included — is random and distinct."""
    encoder = build_encoder(image_size)
    rng = np.random.default_rng(seed)
    for w in encoder.weights:
        shape = tuple(w.shape)
        if w.name == "moving_variance":
            w.assign(rng.uniform(0.5, 1.5, shape).astype(np.float32))
        elif w.name == "kernel":
            fan_in = int(np.prod(shape[:-1]))
            w.assign(rng.normal(0, np.sqrt(2.0 / fan_in), shape).astype(np.float32))
        else:
            w.assign(rng.normal(0, 0.1, shape).astype(np.float32))
    return encoder


def save_keras3(encoder: keras.Model, path: Path) -> Path:
    encoder.save_weights(str(path))
    return path


def save_keras2_layout(encoder: keras.Model, path: Path) -> Path:
    """The layout of ``inception_v3_weights_tf_dim_ordering_tf_kernels_notop.h5``."""
    with h5py.File(path, "w") as f:
        names = []
        for index, layer in enumerate(encoder.layers):
            name = f"layer_{index}"  # Keras 2 names; anything unique — pairing is by order
            names.append(name)
            group = f.create_group(name)
            weight_names = [f"{name}/{w.name}:0" for w in layer.weights]
            group.attrs["weight_names"] = np.array([n.encode() for n in weight_names])
            for weight_name, w in zip(weight_names, layer.weights, strict=True):
                group.create_dataset(weight_name, data=keras.ops.convert_to_numpy(w))
        f.attrs["layer_names"] = np.array([n.encode() for n in names])
        f.attrs["backend"] = b"tensorflow"
        f.attrs["keras_version"] = b"2.1.5"
    return path


def values(encoder: keras.Model) -> list[np.ndarray]:
    return [keras.ops.convert_to_numpy(w) for w in encoder.weights]
