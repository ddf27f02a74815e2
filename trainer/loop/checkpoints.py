"""Checkpoints: what is saved and when.

Saving goes through ``tf.train.CheckpointManager``: data files first, then the
``checkpoint`` state file by atomic rename — so the state file (the commit point the
evaluator watches) never names an incomplete checkpoint.
"""

from __future__ import annotations

import errno
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import tensorflow as tf

from showtell.captioning.model.restoring import RESTORE_ERRORS, TRAIN_SECONDS, restore
from showtell.common.errors import ModelDirError, ShowtellError, first_line
from showtell.common.model_dir import ModelDir

log = logging.getLogger(__name__)

_BOOKKEEPING = {"_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter"}


def _top_level_objects(path: str, hint: str) -> set[str]:
    """Names of the objects saved at the root of checkpoint ``path``."""
    try:
        return {name.split("/")[0] for name, _ in tf.train.list_variables(path)}
    except RESTORE_ERRORS as exc:
        reason = first_line(exc)
        raise ModelDirError(f"{path}: cannot restore ({reason}); {hint}") from exc


@dataclass
class SaveSchedule:
    """Due every ``every_steps`` global steps and/or every ``every_secs`` seconds (of ``clock``:
    monotonic time; tests pass a fake) — and, with ``first_secs``, once that many seconds into the
    run whatever the rest says: a service's evaluator reports on the run in its first minutes
    rather than after the first full interval."""

    every_secs: float | None
    every_steps: int | None
    clock: Callable[[], float] = time.monotonic
    first_secs: float | None = None
    _last_time: float = field(default=0.0, init=False)
    _last_step: int = field(default=0, init=False)
    _saved: bool = field(default=False, init=False)  # this run has saved (the first save is behind it)

    def __post_init__(self) -> None:
        self._last_time = self.clock()

    def start(self, step: int) -> None:
        self._last_step, self._last_time = step, self.clock()

    def due(self, step: int) -> bool:
        if self.every_steps and step - self._last_step >= self.every_steps:
            return True
        elapsed = self.clock() - self._last_time
        if self.first_secs and not self._saved and elapsed >= self.first_secs:
            return True
        return bool(self.every_secs) and elapsed >= self.every_secs

    def saved(self, step: int) -> None:
        self._saved = True
        self.start(step)


class Checkpoints:
    """A ``CheckpointManager`` over model, optimizer(s), global step and the run's training time.

    ``train_seconds`` is the wall-clock seconds this run has trained when the checkpoint is saved
    (each start counted from when its model was built: restores, feature-cache builds and tracing
    are part of getting there), summed over its starts — a resume goes on from the value it
    restores; the time after a start's last save is lost with its steps.  Saved with the weights,
    so an evaluator reads the time to each accuracy from the checkpoint it evaluates, not from
    file times.  A checkpoint written before it existed restores it as 0.

    ``optional`` trackables may be absent from a checkpoint of the same model dir — the encoder's
    optimizer, which exists only once the encoder trains (phase 2); any optimizer in a checkpoint
    ``import-im2txt`` wrote — and start fresh then; a checkpoint's objects this run does not use
    are left unread.
    """

    def __init__(self, model_dir: Path, step: tf.Variable, keep: int, optional: dict | None = None,
                 write_dir: Path | None = None, **trackables) -> None:
        self.model_dir = model_dir  # restored from; written to unless ``write_dir`` is given
        self.step = step
        self.required = {"step": step, **trackables}
        # Outside any strategy's scope: a plain host variable, read and written only here.  float32
        # like every float a checkpoint holds (≈ 0.1 s steps after 12 days of training).
        self.train_seconds = tf.Variable(0.0, dtype=tf.float32, trainable=False, name=TRAIN_SECONDS)
        self.optional = {**(optional or {}), TRAIN_SECONDS: self.train_seconds}
        self._trained_before, self._started = 0.0, time.monotonic()
        self.on_save: Callable[[int, float], None] | None = None  # (step, seconds the save took)
        self.checkpoint = tf.train.Checkpoint(**self.required, **self.optional)
        self.manager = tf.train.CheckpointManager(self.checkpoint, str(write_dir or model_dir),
                                                  max_to_keep=1 if write_dir else keep,
                                                  checkpoint_name=ModelDir.CHECKPOINT_NAME)

    def restore_latest(self) -> int | None:
        """Restore the newest checkpoint; None when the directory has none."""
        path = tf.train.latest_checkpoint(str(self.model_dir))
        if not path:
            return None
        self.restored_from = path
        hint = "move that checkpoint aside or use a new --model-dir"
        present = _top_level_objects(path, hint)
        optional = {name: obj for name, obj in self.optional.items() if name in present}
        for name in sorted(self.optional.keys() - present):
            log.info("%s is not in %s: it starts fresh", name, path)
        unused = present - self.required.keys() - optional.keys() - _BOOKKEEPING
        if unused:
            log.info("not restored from %s (not used by this run): %s", path, ", ".join(sorted(unused)))
        restore(tf.train.Checkpoint(**self.required, **optional), path, hint, partial=bool(unused))
        self._trained_before, self._started = float(self.train_seconds.numpy()), time.monotonic()
        return int(self.step.numpy())


    def save(self) -> str:
        step = int(self.step.numpy())
        if self.manager.latest_checkpoint and ModelDir.step_of(self.manager.latest_checkpoint) == step:
            return self.manager.latest_checkpoint  # this step is already on disk
        started = time.monotonic()
        self.train_seconds.assign(self._trained_before + started - self._started)
        try:
            path = self.manager.save(checkpoint_number=step)
        except (tf.errors.OpError, OSError) as exc:
            if "No space left on device" not in str(exc) and getattr(exc, "errno", None) != errno.ENOSPC:
                raise
            raise self._out_of_space(step) from None
        log.info("saved checkpoint %s", path, extra={"step": step})
        if self.on_save is not None:
            self.on_save(step, time.monotonic() - started)
        return path

    def _out_of_space(self, step: int) -> ShowtellError:
        """A save that hit a full disk: its partial files go (the state file never named them);
        the newest complete checkpoint stays what it was, and the error says so in one line."""
        directory = Path(self.manager.directory)
        for partial in directory.glob(f"{ModelDir.checkpoint_name(step)}[._]*"):
            if partial.is_dir():
                shutil.rmtree(partial, ignore_errors=True)
            else:
                partial.unlink(missing_ok=True)
        usage = shutil.disk_usage(directory)
        kept = self.manager.latest_checkpoint
        return ShowtellError(
            f"--model-dir {directory}: no space left on its device saving {ModelDir.checkpoint_name(step)} "
            f"({usage.free / 2**20:.0f} MB free of {usage.total / 2**20:.0f} MB); "
            f"{Path(kept).name + ' is still the newest complete checkpoint' if kept else 'nothing was saved'}"
            " — free space and start the trainer again: it resumes from there")
