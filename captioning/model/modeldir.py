"""A model directory's record of the model that writes it: ``showtell-model.json``.

Written when training first starts in a directory; read by later trainer runs (a restart
with a different shape is refused before anything is written, naming the differing
field) and by the evaluator (which needs no flags to rebuild the model of a checkpoint).
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import time
from pathlib import Path

import tensorflow as tf
from google.protobuf import text_format

from showtell.captioning.config import ModelConfig
from showtell.captioning.data.vocab import VOCAB, Vocabulary, first_difference, same_ids
from showtell.captioning.internals import checkpoint_state_proto
from showtell.common.errors import ModelDirError, ModelDirIncomplete, first_line
from showtell.common.files import is_url, write_atomic
from showtell.common.run_records import (  # noqa: F401  (the model dir's file names: one home)
    CHECKPOINT_NAME,
    METADATA,
    RUNS,
    checkpoint_step,
    checkpoint_steps,
)

# Written by the trainer after its final checkpoint when the run ended on its own terms
# (--steps reached, --max-seconds, early stop) — not on a signal or a crash; removed when a
# new run starts in the directory.  ``showtell evaluate --exit-when-trained`` ends on it.
FINISHED = "showtell-finished.json"
_FIELD_FLAGS = {
    "vocab_size": "vocab (from --data)",
    "image_size": "--image-size",
    "embedding_size": "--embedding-size",
    "lstm_units": "--lstm-units",
}


def check_model_dir(model_dir: Path, config: ModelConfig, optimizer: str | None = None) -> None:
    """Refuse a model dir whose checkpoints were written by a differently shaped model — or, for
    ``optimizer``, with another ``--optimizer``: its state does not carry over (Adam keeps two
    slots per variable, momentum one, SGD none), and TensorFlow would fail in its own words, or
    leave the slots unread and warn about each of them at exit."""
    checkpoint = tf.train.latest_checkpoint(str(model_dir))
    if not (model_dir / METADATA).is_file():
        if checkpoint:
            raise ModelDirError(
                f"{model_dir}: holds checkpoints but no {METADATA} (not written by showtell train); "
                "use a new --model-dir"
            )
        return
    record = _record(str(model_dir), "use a new --model-dir")
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


def trained_vocabulary_size(model_dir: Path, data: Vocabulary, data_dir: Path) -> int | None:
    """A model dir with checkpoints goes on only with data encoded in its own vocabulary (the
    same words at the same ids; a trained model reads other ids as other words and says nothing).
    Returns the model's vocabulary size — an imported im2txt model's exceeds its data's by rows
    no word owns — or None for a model dir that starts anew."""
    path = model_dir / VOCAB
    if not path.is_file() or not tf.train.latest_checkpoint(str(model_dir)):
        return None
    own = Vocabulary.load(path)
    if same_ids(data, own):
        return len(own)
    raise ModelDirError(f"--data {data_dir}: not in the vocabulary {model_dir} was trained with "
                        f"({first_difference(own, data)}); build the data in it (showtell data coco "
                        f"… --vocab {path}) or use a new --model-dir")


def write_metadata(model_dir: Path, config: ModelConfig, data: dict, encoder_init: dict,
                   optimizer: str | None = None) -> str:
    """Record, when a run starts in a model dir without a checkpoint, the model's shape, where
    its data came from, where its encoder's starting weights came from (source and sha256), the
    optimizer whose state its checkpoints will hold (none for an import) — and a new run id, so
    evaluators tell this run's ``ckpt-2`` from an earlier run's.  Returns the run id."""
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    record = {"run_id": run_id, "model": config.shape_fields(), "data": data, "encoder_init": encoder_init}
    if optimizer is not None:
        record["optimizer"] = optimizer
    write_atomic(model_dir / METADATA, json.dumps(record, indent=2) + "\n")
    return run_id


def mark_finished(model_dir: Path, step: int, checkpoint: str, reason: str) -> None:
    """Say that training is over and which checkpoint is its last."""
    record = {"step": step, "checkpoint": Path(checkpoint).name, "reason": reason}
    write_atomic(model_dir / FINISHED, json.dumps(record) + "\n")


def clear_finished(model_dir: Path) -> bool:
    """A run starts: the directory's training is no longer finished.  True if a marker went."""
    try:
        (model_dir / FINISHED).unlink()
        return True
    except FileNotFoundError:
        return False


def read_run_record(model_dir: str, run_id: str) -> dict | None:
    """A run's record of its configuration (any ``tf.io.gfile`` URL), or None: none written (an
    import, a run from before records), or unreadable (the trainer moves such a file aside)."""
    path = f"{model_dir.rstrip('/')}/{RUNS}/{run_id or 'unnamed'}.json"
    try:
        record = json.loads(tf.io.gfile.GFile(path).read())
        return record if isinstance(record.get("revisions"), list) and record["revisions"] else None
    except (tf.errors.OpError, ValueError, AttributeError):
        return None


def recorded_runs(model_dir: str) -> dict[str, dict]:
    """run id → record of every run the model dir records (any ``tf.io.gfile`` URL); unreadable
    records and records without a revision are left out (``read_run_record``'s rule)."""
    try:
        paths = tf.io.gfile.glob(f"{model_dir.rstrip('/')}/{RUNS}/*.json")
    except tf.errors.OpError:
        return {}
    found = {}
    for path in paths:
        run_id = path.rsplit("/", 1)[-1][:-len(".json")]
        record = read_run_record(model_dir, run_id)
        if record is not None:
            found[run_id] = record
    return found


def read_finished(model_dir: str) -> dict | None:
    """The finished marker of a model dir (any ``tf.io.gfile`` URL), or None: still training,
    or a marker being replaced."""
    path = model_dir.rstrip("/") + "/" + FINISHED
    try:
        record = json.loads(tf.io.gfile.GFile(path).read())
        return record if isinstance(record.get("step"), int) else None
    except (tf.errors.OpError, ValueError, AttributeError):
        return None


def recorded_encoder_init(model_dir: Path) -> dict | None:
    """The ``encoder_init`` a model dir records (None: a new model dir)."""
    path = model_dir / METADATA
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text()).get("encoder_init") or {"kind": "none"}
    except (OSError, ValueError) as exc:
        raise ModelDirError(f"{path}: unreadable ({exc}); use a new --model-dir") from exc


def _record(model_dir: str, hint: str) -> dict:
    """A model dir's record (with its ``model`` section), read through ``tf.io.gfile`` so a model
    dir may be any URL TensorFlow reads (``gs://…``)."""
    path = model_dir.rstrip("/") + "/" + METADATA
    try:
        record = json.loads(tf.io.gfile.GFile(path).read())
        if "model" not in record:
            raise KeyError("model")  # a record without its model section is unreadable
        return record
    except tf.errors.NotFoundError as exc:
        raise ModelDirIncomplete(f"{path}: missing; is {model_dir} a showtell model directory?") from exc
    except (ValueError, KeyError, tf.errors.OpError) as exc:
        raise ModelDirError(f"{path}: unreadable ({exc}); {hint}") from exc


def read_run_id(model_dir: str) -> str | None:
    """The run id a model dir records ('' before run ids; None while its record is missing or
    being replaced — keep the run you knew)."""
    path = model_dir.rstrip("/") + "/" + METADATA
    try:
        return str(json.loads(tf.io.gfile.GFile(path).read()).get("run_id", ""))
    except (tf.errors.OpError, ValueError, AttributeError):
        return None


def read_model_config(model_dir: str | Path, base: ModelConfig | None = None) -> ModelConfig:
    """The model shape recorded in a model dir (for the evaluator and ``caption``)."""
    recorded = _record(str(model_dir), "is the trainer still writing it?")["model"]
    return dataclasses.replace(base or ModelConfig(), **recorded)


def model_vocabulary(model_dir: str, dataset: tuple[str, Vocabulary] | None = None) -> Vocabulary:
    """The vocabulary the model was trained with: the model dir's own ``vocab.txt`` (the
    trainer copies it there).  A model dir from before that has none: then the training
    dataset's, as ``showtell-model.json`` records it, and a ``dataset`` vocabulary (name,
    words) only if it is that one word for word — ids from another vocabulary would give
    fluent nonsense, not an error."""
    base = model_dir.rstrip("/") + "/"
    own = _read_text(base + VOCAB)
    if own is not None:
        return Vocabulary.parse(own, base + VOCAB)
    try:
        recorded_dir = json.loads(tf.io.gfile.GFile(base + METADATA).read())["data"]["dir"]
    except (tf.errors.OpError, ValueError, KeyError, TypeError):
        recorded_dir = None
    recorded = _read_text(f"{recorded_dir}/{VOCAB}") if recorded_dir else None
    if recorded is None:
        raise ModelDirIncomplete(f"{base}{VOCAB}: missing, and the training data's vocabulary "
                                 f"({recorded_dir or 'not recorded'}) cannot be read; copy the training "
                                 f"dataset's {VOCAB} into the model dir")
    trained = Vocabulary.parse(recorded, f"{recorded_dir}/{VOCAB}")
    if dataset is not None:
        name, vocab = dataset
        difference = first_difference(trained, vocab)
        if difference:
            raise ModelDirError(f"{base}{VOCAB}: missing, and {name} differs from the training data's "
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


# -- checkpoints: TensorFlow's CheckpointManager layout ------------------------------------

STATE_FILE = "checkpoint"  # names the checkpoints; renamed into place after their data files
# A checkpoint's variable: the run's training wall-clock seconds when it was saved (the trainer's
# ``Checkpoints``), read by the evaluator for the time to each accuracy.
TRAIN_SECONDS = "train_seconds"


def checkpoint_name(step: int) -> str:
    """The file prefix of the checkpoint at ``step`` (``ckpt-1200``)."""
    return f"{CHECKPOINT_NAME}-{step}"


def saved_at(prefix: str) -> float:
    """When the checkpoint ``prefix`` was written (its ``.index`` file's modification time, in
    seconds); 0 when it cannot be read (deleted, not arrived)."""
    return _modified(prefix + ".index")


def run_started(model_dir: str) -> float | None:
    """When the model dir's current run began (its ``showtell-model.json`` was written)."""
    return _modified(os.path.join(model_dir, METADATA)) or None


def _modified(path: str) -> float:
    try:
        return tf.io.gfile.stat(path).mtime_nsec / 1e9
    except tf.errors.OpError:
        return 0.0


def read_state(model_dir: str) -> list[str]:
    """Checkpoint prefixes named by the state file, oldest first ([] when there is none).

    Not ``tf.train.get_checkpoint_state``: it logs and returns None for a corrupt file, which
    would be indistinguishable from "no checkpoint yet" and leave the user no reason to see.
    """
    path = os.path.join(model_dir, STATE_FILE)
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
    return [n if os.path.isabs(n) or is_url(n) else os.path.join(model_dir, n) for n in names]


def latest_checkpoint(model_dir: str | Path) -> str:
    """The newest checkpoint the state file names; one line when there is none."""
    path = tf.train.latest_checkpoint(str(model_dir))
    if not path:
        raise ModelDirError(f"{model_dir}: no checkpoint yet (no '{STATE_FILE}' state file naming one)")
    return path
