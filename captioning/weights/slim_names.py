"""TF-slim Inception v3 variable names, in the order Keras' ``InceptionV3`` creates its layers.

im2txt initialises its encoder from ``inception_v3.ckpt`` (``inception_v3_2016_08_28.tar.gz``),
written by ``tensorflow/models/research/slim/nets/inception_v3.py``.  Every convolution there is
``slim.conv2d`` with batch norm and no bias, so each one leaves four tensors::

    InceptionV3/<scope>/weights                  [h, w, in, out]
    InceptionV3/<scope>/BatchNorm/beta           [out]   (scale=False: no gamma)
    InceptionV3/<scope>/BatchNorm/moving_mean    [out]
    InceptionV3/<scope>/BatchNorm/moving_variance[out]

Keras' ``keras.applications.InceptionV3`` builds the same 94 convolutions (``conv2d_bn``:
Conv2D without bias, then BatchNormalization(scale=False)) in the same order, branch by branch;
this table is that order with slim's scope names — including slim's quirks (``Mixed_5c``'s
``Conv_1_0c_5x5``, ``Mixed_6a``'s 3×3 convolutions named ``…_1x1``).  The test suite checks the
mapping by running an independent slim-named Inception forward pass against the Keras encoder.
"""

from __future__ import annotations

SCOPE = "InceptionV3"

_STEM = ["Conv2d_1a_3x3", "Conv2d_2a_3x3", "Conv2d_2b_3x3", "Conv2d_3b_1x1", "Conv2d_4a_3x3"]
_35x35 = ["Branch_0/Conv2d_0a_1x1", "Branch_1/Conv2d_0a_1x1", "Branch_1/Conv2d_0b_5x5",
          "Branch_2/Conv2d_0a_1x1", "Branch_2/Conv2d_0b_3x3", "Branch_2/Conv2d_0c_3x3",
          "Branch_3/Conv2d_0b_1x1"]
_MIXED_5C = ["Branch_0/Conv2d_0a_1x1", "Branch_1/Conv2d_0b_1x1", "Branch_1/Conv_1_0c_5x5",
             "Branch_2/Conv2d_0a_1x1", "Branch_2/Conv2d_0b_3x3", "Branch_2/Conv2d_0c_3x3",
             "Branch_3/Conv2d_0b_1x1"]
_MIXED_6A = ["Branch_0/Conv2d_1a_1x1", "Branch_1/Conv2d_0a_1x1", "Branch_1/Conv2d_0b_3x3",
             "Branch_1/Conv2d_1a_1x1"]
_17x17 = ["Branch_0/Conv2d_0a_1x1", "Branch_1/Conv2d_0a_1x1", "Branch_1/Conv2d_0b_1x7",
          "Branch_1/Conv2d_0c_7x1", "Branch_2/Conv2d_0a_1x1", "Branch_2/Conv2d_0b_7x1",
          "Branch_2/Conv2d_0c_1x7", "Branch_2/Conv2d_0d_7x1", "Branch_2/Conv2d_0e_1x7",
          "Branch_3/Conv2d_0b_1x1"]
_MIXED_7A = ["Branch_0/Conv2d_0a_1x1", "Branch_0/Conv2d_1a_3x3", "Branch_1/Conv2d_0a_1x1",
             "Branch_1/Conv2d_0b_1x7", "Branch_1/Conv2d_0c_7x1", "Branch_1/Conv2d_1a_3x3"]


def _8x8(branch_1_3x1: str) -> list[str]:
    return ["Branch_0/Conv2d_0a_1x1", "Branch_1/Conv2d_0a_1x1", "Branch_1/Conv2d_0b_1x3",
            f"Branch_1/{branch_1_3x1}", "Branch_2/Conv2d_0a_1x1", "Branch_2/Conv2d_0b_3x3",
            "Branch_2/Conv2d_0c_1x3", "Branch_2/Conv2d_0d_3x1", "Branch_3/Conv2d_0b_1x1"]


_BLOCKS = [
    ("Mixed_5b", _35x35), ("Mixed_5c", _MIXED_5C), ("Mixed_5d", _35x35), ("Mixed_6a", _MIXED_6A),
    ("Mixed_6b", _17x17), ("Mixed_6c", _17x17), ("Mixed_6d", _17x17), ("Mixed_6e", _17x17),
    ("Mixed_7a", _MIXED_7A), ("Mixed_7b", _8x8("Conv2d_0b_3x1")), ("Mixed_7c", _8x8("Conv2d_0c_3x1")),
]

CONV_SCOPES: list[str] = [f"{SCOPE}/{name}" for name in _STEM] + [
    f"{SCOPE}/{block}/{conv}" for block, convs in _BLOCKS for conv in convs
]

# Keras variable name (last path component) → slim tensor name under a conv scope.
CONV_TENSORS = {"kernel": "weights"}
BN_TENSORS = {"beta": "BatchNorm/beta", "gamma": "BatchNorm/gamma",
              "moving_mean": "BatchNorm/moving_mean", "moving_variance": "BatchNorm/moving_variance"}
