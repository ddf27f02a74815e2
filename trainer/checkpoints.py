"""Checkpoints: what is saved and when.

Saving goes through ``tf.train.CheckpointManager``: data files first, then the
``checkpoint`` state file by atomic rename — so the state file (the commit point the
evaluator watches) never names an incomplete checkpoint.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import tensorflow as tf

from captioning.modeldir import restore

log = logging.getLogger(__name__)

@dataclass
class SaveSchedule:
    """Due every ``every_steps`` global steps and/or every ``every_secs`` seconds."""

    every_secs: float | None
    every_steps: int | None
    _last_time: float = field(default_factory=time.monotonic)
    _last_step: int = 0

    def start(self, step: int) -> None:
        self._last_step, self._last_time = step, time.monotonic()

    def due(self, step: int) -> bool:
        if self.every_steps and step - self._last_step >= self.every_steps:
            return True
        return bool(self.every_secs) and time.monotonic() - self._last_time >= self.every_secs

    def saved(self, step: int) -> None:
        self.start(step)


class Checkpoints:
    """A ``CheckpointManager`` over model, optimizer and global step."""

    def __init__(self, model_dir: Path, step: tf.Variable, keep: int, **trackables) -> None:
        self.model_dir = model_dir
        self.step = step
        self.checkpoint = tf.train.Checkpoint(step=step, **trackables)
        self.manager = tf.train.CheckpointManager(self.checkpoint, str(model_dir), max_to_keep=keep)

    def restore_latest(self) -> int | None:
        """Restore the newest checkpoint; None when the directory has none."""
        path = self.manager.latest_checkpoint
        if not path:
            return None
        restore(self.checkpoint, path, "move that checkpoint aside or use a new --model-dir")
        return int(self.step.numpy())

    def save(self) -> str:
        step = int(self.step.numpy())
        if self.manager.latest_checkpoint and self.manager.latest_checkpoint.endswith(f"-{step}"):
            return self.manager.latest_checkpoint  # this step is already on disk
        path = self.manager.save(checkpoint_number=step)
        log.info("saved checkpoint %s", path)
        return path
