"""What restoring a model dir's checkpoints takes: the state file read with a reason when it cannot
be, the newest checkpoint, the shape and vocabulary the dir records (to build the model a checkpoint
restores into) and the checks that refuse a run whose model or data do not fit them — and
``restore`` itself, whose every failure is one line.  The dir's files are ``ModelDir``'s.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Protocol

import tensorflow as tf
from google.protobuf import text_format

from showtell.captioning.config import ModelConfig
from showtell.captioning.data.vocab import VOCAB, Vocabulary, first_difference, same_ids
from showtell.captioning.internals import checkpoint_state_proto
from showtell.common.errors import DataError, ModelDirError, ModelDirIncomplete, first_line
from showtell.common.model_dir import ModelDir

_FIELD_FLAGS = {
    "vocab_size": "vocab (from --data)",
    "image_size": "--image-size",
    "embedding_size": "--embedding-size",
    "lstm_units": "--lstm-units",
}


def check_model_dir(model_dir: ModelDir, config: ModelConfig, optimizer: str | None = None) -> None:
    """Refuse a model dir whose checkpoints were written by a differently shaped model — or, for
    ``optimizer``, with another ``--optimizer``: its state does not carry over (Adam keeps two
    slots per variable, momentum one, SGD none), and TensorFlow would fail in its own words, or
    leave the slots unread and warn about each of them at exit."""
    checkpoint = tf.train.latest_checkpoint(model_dir.root)
    if not model_dir.has_metadata():
        if checkpoint:
            raise ModelDirError(
                f"{model_dir}: holds checkpoints but no {ModelDir.METADATA} (not written by showtell train); "
                "use a new --model-dir"
            )
        return
    record = model_dir.metadata("use a new --model-dir")
    for name, value in config.shape_fields().items():
        if name in record["model"] and record["model"][name] != value:
            raise ModelDirError(
                f"{model_dir} was written by a model with {name} {record['model'][name]}, this one has "
                f"{name} {value} ({_FIELD_FLAGS[name]}); use a new --model-dir"
            )
    recorded = record.get("optimizer")  # none for an import
    if checkpoint and optimizer and recorded and recorded != optimizer:
        raise ModelDirError(f"{model_dir} was trained with --optimizer {recorded}, this run has --optimizer "
                            f"{optimizer}; resume with --optimizer {recorded}, or use a new --model-dir")


def trained_vocabulary_size(model_dir: ModelDir, data: Vocabulary, data_dir: Path) -> int | None:
    """A model dir with checkpoints goes on only with data encoded in its own vocabulary (the
    same words at the same ids; a trained model reads other ids as other words and says nothing).
    Returns the model's vocabulary size — an imported im2txt model's exceeds its data's by rows
    no word owns — or None for a model dir that starts anew."""
    path = Path(model_dir.file(ModelDir.VOCAB))
    if not path.is_file() or not tf.train.latest_checkpoint(model_dir.root):
        return None
    own = Vocabulary.load(path)
    if same_ids(data, own):
        return len(own)
    raise ModelDirError(f"--data {data_dir}: not in the vocabulary {model_dir} was trained with "
                        f"({first_difference(own, data)}); build the data in it (showtell data coco "
                        f"… --vocab {path}) or use a new --model-dir")


class TrainingData(Protocol):
    """What ``model_to_train`` reads of a training split (``splits.SplitData``)."""

    dir: Path
    vocab: Vocabulary

    @property
    def image_size(self) -> int: ...


def model_to_train(model_dir: ModelDir | None, config: ModelConfig, data: TrainingData,
                   image_size: int | None, optimizer: str) -> ModelConfig:
    """The model a run trains on ``data``: vocabulary and image size filled in from the dataset —
    or, where ``model_dir`` has checkpoints, the vocabulary it was trained in — sizes the data
    cannot serve refused, and a model dir written by another shape or optimizer refused (None: no
    model dir to read)."""
    vocab_size = trained_vocabulary_size(model_dir, data.vocab, data.dir) if model_dir is not None else None
    size = image_size or data.image_size or config.image_size
    if data.image_size and size > data.image_size:
        raise DataError(
            f"--image-size {size}: the images in {data.dir} are {data.image_size} px and would be "
            f"upsampled; rebuild the data with --image-size {size} or pass --image-size {data.image_size}"
        )
    model = dataclasses.replace(config, vocab_size=vocab_size or len(data.vocab), image_size=size)
    if model_dir is not None:
        check_model_dir(model_dir, model, optimizer)
    return model


def read_model_config(model_dir: ModelDir, base: ModelConfig | None = None) -> ModelConfig:
    """The model shape recorded in a model dir (for the evaluator and ``caption``)."""
    recorded = model_dir.metadata("is the trainer still writing it?")["model"]
    return dataclasses.replace(base or ModelConfig(), **recorded)


def model_vocabulary(model_dir: ModelDir, dataset: tuple[str, Vocabulary] | None = None) -> Vocabulary:
    """The vocabulary the model was trained with: the model dir's own ``vocab.txt`` (the
    trainer copies it there).  A model dir from before that has none: then the training
    dataset's, as ``showtell-model.json`` records it, and a ``dataset`` vocabulary (name,
    words) only if it is that one word for word — ids from another vocabulary would give
    fluent nonsense, not an error."""
    own_path = model_dir.file(ModelDir.VOCAB)
    own = _read_text(own_path)
    if own is not None:
        return Vocabulary.parse(own, own_path)
    try:
        recorded_dir = json.loads(tf.io.gfile.GFile(model_dir.file(ModelDir.METADATA)).read())["data"]["dir"]
    except (tf.errors.OpError, ValueError, KeyError, TypeError):
        recorded_dir = None
    recorded = _read_text(f"{recorded_dir}/{VOCAB}") if recorded_dir else None
    if recorded is None:
        raise ModelDirIncomplete(f"{own_path}: missing, and the training data's vocabulary "
                                 f"({recorded_dir or 'not recorded'}) cannot be read; copy the training "
                                 f"dataset's {VOCAB} into the model dir")
    trained = Vocabulary.parse(recorded, f"{recorded_dir}/{VOCAB}")
    if dataset is not None:
        name, vocab = dataset
        difference = first_difference(trained, vocab)
        if difference:
            raise ModelDirError(f"{own_path}: missing, and {name} differs from the training data's "
                                f"vocabulary ({difference}); copy {recorded_dir}/{VOCAB} into the model dir")
    return trained


def _read_text(path: str) -> str | None:
    try:
        return tf.io.gfile.GFile(path).read()
    except tf.errors.NotFoundError:
        return None


RESTORE_ERRORS = (tf.errors.OpError, ValueError, AssertionError, IndexError, KeyError, OSError)


def restore(checkpoint: tf.train.Checkpoint, path: str, hint: str, partial: bool = False) -> None:
    """Restore ``path`` into ``checkpoint``; any failure becomes one ``ModelDirError`` line.

    A truncated data file surfaces from TensorFlow as anything from ``DataLossError`` to a
    bare ``IndexError``; the user needs the file name and what to do, not the stack.
    """
    try:
        status = checkpoint.restore(path)
        if partial:
            status = status.expect_partial()
        status.assert_existing_objects_matched()
    except RESTORE_ERRORS as exc:
        reason = first_line(exc)
        raise ModelDirError(f"{path}: cannot restore ({reason}); {hint}") from exc


# A checkpoint's variable: the run's training wall-clock seconds when it was saved (the trainer's
# ``Checkpoints``), read by the evaluator for the time to each accuracy.
TRAIN_SECONDS = "train_seconds"


def read_state(model_dir: ModelDir) -> list[str]:
    """Checkpoint prefixes named by the state file, oldest first ([] when there is none).

    Not ``tf.train.get_checkpoint_state``: it logs and returns None for a corrupt file, which
    would be indistinguishable from "no checkpoint yet" and leave the user no reason to see.
    """
    path = model_dir.file(ModelDir.STATE_FILE)
    if not tf.io.gfile.exists(path):
        return []
    try:
        text = tf.io.gfile.GFile(path).read()
        state = text_format.Parse(text, checkpoint_state_proto())
    except (text_format.ParseError, UnicodeDecodeError) as exc:
        raise ModelDirError(f"{path}: unreadable checkpoint state file ({exc}); waiting for the next "
                            "write") from exc
    if not text.strip():
        # Caught between truncation and write: a copy written in place (cp, some syncs) opens the
        # file empty first.  Read as "names nothing", every checkpoint would look deleted.
        raise ModelDirError(f"{path}: empty checkpoint state file (being written?); waiting for the next "
                            "write")
    names = list(state.all_model_checkpoint_paths) or (
        [state.model_checkpoint_path] if state.model_checkpoint_path else [])
    return [model_dir.prefix(n) for n in names]


def latest_checkpoint(model_dir: ModelDir) -> str:
    """The newest checkpoint the state file names; one line when there is none."""
    path = tf.train.latest_checkpoint(model_dir.root)
    if not path:
        raise ModelDirError(f"{model_dir}: no checkpoint yet (no '{ModelDir.STATE_FILE}' state file "
                            "naming one)")
    return path
