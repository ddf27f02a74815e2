"""An independent TF-slim Inception v3 (``inception_v3_base`` + average pool) over a dict of
slim-named tensors, written from tensorflow/models' ``research/slim/nets/inception_v3.py``.

It shares nothing with ``showtell.captioning.weights.slim_names``: the test loads a slim
checkpoint into the Keras encoder and checks that both networks compute the same features —
proof that every tensor went to the right layer (two same-shaped 1×1 convolutions swapped
would change the output).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

EPSILON = 0.001  # slim's batch_norm epsilon in inception_arg_scope


class Params:
    """Slim tensors by name; with ``create``, missing ones are drawn (He-scaled) on first use."""

    def __init__(self, values: dict[str, np.ndarray] | None = None, seed: int = 0) -> None:
        self.values = dict(values or {})
        self.rng = np.random.default_rng(seed) if values is None else None

    def conv(self, scope: str, kh: int, kw: int, cin: int, depth: int) -> tuple[np.ndarray, ...]:
        names = [f"{scope}/weights", f"{scope}/BatchNorm/beta", f"{scope}/BatchNorm/moving_mean",
                 f"{scope}/BatchNorm/moving_variance"]
        if self.rng is not None and names[0] not in self.values:
            r = self.rng
            self.values[names[0]] = r.normal(0, np.sqrt(2.0 / (kh * kw * cin)), (kh, kw, cin, depth))
            self.values[names[1]] = r.normal(0, 0.1, depth)
            self.values[names[2]] = r.normal(0, 0.1, depth)
            self.values[names[3]] = r.uniform(0.5, 1.5, depth)
            for name in names:
                self.values[name] = self.values[name].astype(np.float32)
        return tuple(self.values[n] for n in names)


def _conv(p: Params, net: tf.Tensor, scope: str, depth: int, kernel: tuple[int, int], stride: int = 1,
          padding: str = "SAME") -> tf.Tensor:
    w, beta, mean, var = p.conv(scope, kernel[0], kernel[1], net.shape[-1], depth)
    y = tf.nn.conv2d(net, w, stride, padding)
    return tf.nn.relu((y - mean) / np.sqrt(var + EPSILON) + beta)


def _max(net, padding="VALID"):
    return tf.nn.max_pool2d(net, 3, 2, padding)


def _avg(net):
    return tf.nn.avg_pool2d(net, 3, 1, "SAME")


def features(images: tf.Tensor, p: Params) -> tf.Tensor:
    """``inception_v3_base`` up to Mixed_7c, then the global average pool (im2txt's 2048-vector)."""
    s = "InceptionV3/"
    net = _conv(p, images, s + "Conv2d_1a_3x3", 32, (3, 3), 2, "VALID")
    net = _conv(p, net, s + "Conv2d_2a_3x3", 32, (3, 3), 1, "VALID")
    net = _conv(p, net, s + "Conv2d_2b_3x3", 64, (3, 3))
    net = _max(net)
    net = _conv(p, net, s + "Conv2d_3b_1x1", 80, (1, 1), 1, "VALID")
    net = _conv(p, net, s + "Conv2d_4a_3x3", 192, (3, 3), 1, "VALID")
    net = _max(net)

    for block, b1_first, b1_second, pool_depth in (("Mixed_5b", "Conv2d_0a_1x1", "Conv2d_0b_5x5", 32),
                                                   ("Mixed_5c", "Conv2d_0b_1x1", "Conv_1_0c_5x5", 64),
                                                   ("Mixed_5d", "Conv2d_0a_1x1", "Conv2d_0b_5x5", 64)):
        m = s + block + "/"
        b0 = _conv(p, net, m + "Branch_0/Conv2d_0a_1x1", 64, (1, 1))
        b1 = _conv(p, net, m + "Branch_1/" + b1_first, 48, (1, 1))
        b1 = _conv(p, b1, m + "Branch_1/" + b1_second, 64, (5, 5))
        b2 = _conv(p, net, m + "Branch_2/Conv2d_0a_1x1", 64, (1, 1))
        b2 = _conv(p, b2, m + "Branch_2/Conv2d_0b_3x3", 96, (3, 3))
        b2 = _conv(p, b2, m + "Branch_2/Conv2d_0c_3x3", 96, (3, 3))
        b3 = _conv(p, _avg(net), m + "Branch_3/Conv2d_0b_1x1", pool_depth, (1, 1))
        net = tf.concat([b0, b1, b2, b3], 3)

    m = s + "Mixed_6a/"
    b0 = _conv(p, net, m + "Branch_0/Conv2d_1a_1x1", 384, (3, 3), 2, "VALID")
    b1 = _conv(p, net, m + "Branch_1/Conv2d_0a_1x1", 64, (1, 1))
    b1 = _conv(p, b1, m + "Branch_1/Conv2d_0b_3x3", 96, (3, 3))
    b1 = _conv(p, b1, m + "Branch_1/Conv2d_1a_1x1", 96, (3, 3), 2, "VALID")
    net = tf.concat([b0, b1, _max(net)], 3)

    for block, d in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        m = s + block + "/"
        b0 = _conv(p, net, m + "Branch_0/Conv2d_0a_1x1", 192, (1, 1))
        b1 = _conv(p, net, m + "Branch_1/Conv2d_0a_1x1", d, (1, 1))
        b1 = _conv(p, b1, m + "Branch_1/Conv2d_0b_1x7", d, (1, 7))
        b1 = _conv(p, b1, m + "Branch_1/Conv2d_0c_7x1", 192, (7, 1))
        b2 = _conv(p, net, m + "Branch_2/Conv2d_0a_1x1", d, (1, 1))
        b2 = _conv(p, b2, m + "Branch_2/Conv2d_0b_7x1", d, (7, 1))
        b2 = _conv(p, b2, m + "Branch_2/Conv2d_0c_1x7", d, (1, 7))
        b2 = _conv(p, b2, m + "Branch_2/Conv2d_0d_7x1", d, (7, 1))
        b2 = _conv(p, b2, m + "Branch_2/Conv2d_0e_1x7", 192, (1, 7))
        b3 = _conv(p, _avg(net), m + "Branch_3/Conv2d_0b_1x1", 192, (1, 1))
        net = tf.concat([b0, b1, b2, b3], 3)

    m = s + "Mixed_7a/"
    b0 = _conv(p, net, m + "Branch_0/Conv2d_0a_1x1", 192, (1, 1))
    b0 = _conv(p, b0, m + "Branch_0/Conv2d_1a_3x3", 320, (3, 3), 2, "VALID")
    b1 = _conv(p, net, m + "Branch_1/Conv2d_0a_1x1", 192, (1, 1))
    b1 = _conv(p, b1, m + "Branch_1/Conv2d_0b_1x7", 192, (1, 7))
    b1 = _conv(p, b1, m + "Branch_1/Conv2d_0c_7x1", 192, (7, 1))
    b1 = _conv(p, b1, m + "Branch_1/Conv2d_1a_3x3", 192, (3, 3), 2, "VALID")
    net = tf.concat([b0, b1, _max(net)], 3)

    for block, b1_3x1 in (("Mixed_7b", "Conv2d_0b_3x1"), ("Mixed_7c", "Conv2d_0c_3x1")):
        m = s + block + "/"
        b0 = _conv(p, net, m + "Branch_0/Conv2d_0a_1x1", 320, (1, 1))
        b1 = _conv(p, net, m + "Branch_1/Conv2d_0a_1x1", 384, (1, 1))
        b1 = tf.concat([_conv(p, b1, m + "Branch_1/Conv2d_0b_1x3", 384, (1, 3)),
                        _conv(p, b1, m + "Branch_1/" + b1_3x1, 384, (3, 1))], 3)
        b2 = _conv(p, net, m + "Branch_2/Conv2d_0a_1x1", 448, (1, 1))
        b2 = _conv(p, b2, m + "Branch_2/Conv2d_0b_3x3", 384, (3, 3))
        b2 = tf.concat([_conv(p, b2, m + "Branch_2/Conv2d_0c_1x3", 384, (1, 3)),
                        _conv(p, b2, m + "Branch_2/Conv2d_0d_3x1", 384, (3, 1))], 3)
        b3 = _conv(p, _avg(net), m + "Branch_3/Conv2d_0b_1x1", 192, (1, 1))
        net = tf.concat([b0, b1, b2, b3], 3)
    return tf.reduce_mean(net, [1, 2])


def random_params(image_size: int = 75, seed: int = 0) -> dict[str, np.ndarray]:
    """Draw every slim tensor by running the network once on zeros."""
    p = Params(seed=seed)
    features(tf.zeros([1, image_size, image_size, 3]), p)
    return p.values


def save_slim_checkpoint(prefix: str, values: dict[str, np.ndarray]) -> None:
    """A name-based (slim-style) checkpoint: each tensor saved under exactly its slim name."""
    names = sorted(values)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(values[n]) for n in names])
