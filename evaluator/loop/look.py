"""One look at the model dir: what its state file names, the run they belong to and the
trainer's finished marker — read together, once per wake-up, with no side effects.  What to do
about it is ``schedule``'s and the controller's to decide.
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf

from showtell.captioning.model.modeldir import checkpoint_step, read_finished, read_run_id, read_state
from showtell.common.errors import ShowtellError


@dataclass(frozen=True)
class Look:
    """What one read of the model dir found."""

    named: tuple[str, ...] | None  # checkpoints the state file names, oldest first; None: unreadable
    state_error: str  # why the state file could not be read ('' when it could)
    run: str | None  # the run id its ``showtell-model.json`` records; None: missing or being replaced
    finished: dict | None  # the trainer's finished marker, if it wrote one

    @property
    def newest_step(self) -> int | None:
        return max((checkpoint_step(p) for p in self.named), default=None) if self.named else None


def look_at(model_dir: str, *, finished: bool = True) -> Look:
    """Read the state file, the run id and (unless ``finished`` is False) the finished marker."""
    try:
        named, error = tuple(read_state(model_dir)), ""
    except ShowtellError as exc:
        named, error = None, str(exc)
    except (OSError, tf.errors.OpError) as exc:  # replaced or removed between two calls
        named, error = None, f"{model_dir}: cannot read the checkpoint state file ({exc}); waiting for the " \
                             "next write"
    return Look(named=named, state_error=error, run=read_run_id(model_dir),
                finished=read_finished(model_dir) if finished else None)
