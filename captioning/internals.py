"""The private TensorFlow / Keras names showtell depends on — here and nowhere else.

Each is used because the public API lacks what showtell needs, not for convenience; an upgrade
that moves one breaks this module alone (``tests/test_layers.py`` keeps private imports out of
every other module).

* ``CheckpointState``: the text proto of a model dir's ``checkpoint`` state file.  The public
  ``tf.train.get_checkpoint_state`` returns None for a corrupt file as for a missing one, so the
  evaluator could not tell the user the file is unreadable.
* ``to_snake_case``: the rule by which Keras' ``.weights.h5`` writer names layers; reading such a
  file by those names (instead of ``load_weights``) lets a bad file's error name the tensor.
"""

from __future__ import annotations


def checkpoint_state_proto():
    """A fresh, empty ``CheckpointState`` message (imported on first use: TensorFlow is heavy)."""
    from tensorflow.python.training.checkpoint_state_pb2 import CheckpointState

    return CheckpointState()


def keras_layer_name(class_name: str) -> str:
    """``BatchNormalization`` → ``batch_normalization``, as Keras names a layer in a weights file."""
    from keras.src.utils.naming import to_snake_case

    return to_snake_case(class_name)
