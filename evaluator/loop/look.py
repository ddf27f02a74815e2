"""One look at the model dir: what its state file names, the run they belong to and the
trainer's finished marker — read together, once per wake-up, with no side effects.  What to do
about it is ``schedule``'s and the controller's to decide.
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf

from showtell.captioning.model.restoring import read_state
from showtell.common.errors import ShowtellError
from showtell.common.model_dir import ModelDir


@dataclass(frozen=True)
class Look:
    """What one read of the model dir found."""

    named: tuple[str, ...] | None  # checkpoints the state file names, oldest first; None: unreadable
    state_error: str  # why the state file could not be read ('' when it could)
    run: str | None  # the run id its ``showtell-model.json`` records; None: missing or being replaced
    finished: dict | None  # the trainer's finished marker, if it wrote one

    @property
    def newest_step(self) -> int | None:
        return max((ModelDir.step_of(p) for p in self.named), default=None) if self.named else None


def look_at(model_dir: ModelDir, *, finished: bool = True) -> Look:
    """Read the state file, the run id (afresh: a new run may have begun) and (unless
    ``finished`` is False) the finished marker."""
    try:
        named, error = tuple(read_state(model_dir)), ""
    except ShowtellError as exc:
        named, error = None, str(exc)
    except (OSError, tf.errors.OpError) as exc:  # replaced or removed between two calls
        named, error = None, f"{model_dir}: cannot read the checkpoint state file ({exc}); waiting for the " \
                             "next write"
    return Look(named=named, state_error=error, run=model_dir.read_run_id(),
                finished=model_dir.finished() if finished else None)
