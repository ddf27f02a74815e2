"""What a run's record says, read without TensorFlow: its status and row (``showtell runs``,
``ListRuns``) and the settings two runs differ in.  The records themselves are read and written
through ``ModelDir`` (``common/model_dir.py``), the one address of a model dir's files.
"""

from __future__ import annotations

from dataclasses import dataclass

from showtell.common.errors import ShowtellError
from showtell.common.model_dir import differences

VERSIONS = ("showtell", "tensorflow", "keras", "python")


@dataclass
class Run:
    """One run as ``showtell runs`` and ``ListRuns`` show it."""

    run_id: str
    model_dir: str
    started: str
    step: int
    steps: int | None  # the last revision's --steps
    status: str  # training | finished (reason) | stopped (reason)
    best: float | None = None
    best_step: int | None = None
    target_seconds: float | None = None  # training seconds when --target was first met
    target_step: int | None = None


def status(record: dict, *, current: bool, training: bool) -> str:
    """``training``, ``finished (reason)`` or ``stopped (reason)`` from a run's record: its last end
    against its last start.  ``current``: the model dir's run now; ``training``: its trainer holds
    the dir (when that cannot be known, a current run without a later end counts as training)."""
    revisions, ends = record.get("revisions") or [], record.get("ends") or []
    last_end = ends[-1] if ends else None
    if current and training:
        return "training"
    if last_end is None or last_end.get("at", "") < revisions[-1].get("at", ""):
        return "stopped (no end recorded: killed?)"
    return f"{'finished' if last_end.get('finished') else 'stopped'} ({last_end.get('reason')})"


def summary(run_id: str, record: dict, model_dir: str, *, current: bool, training: bool,
            newest_checkpoint: int | None) -> Run | None:
    """A run's row from its record (None: a record without revisions).  The current run's step is
    its newest checkpoint's when known; another run's, its last end's or last start's."""
    revisions, ends = record.get("revisions") or [], record.get("ends") or []
    if not revisions:
        return None
    last_end = ends[-1] if ends else None
    if current and newest_checkpoint is not None:
        step = newest_checkpoint
    else:
        step = int((last_end or revisions[-1]).get("step") or 0)
    return Run(run_id, model_dir, str(revisions[0].get("at", "")), step,
               (revisions[-1].get("settings") or {}).get("steps"),
               status(record, current=current, training=training))


def diff(a: dict, b: dict) -> list[str]:
    """The settings of A's and B's last revisions that differ, then the versions.  Runs of two
    model shapes compare like any others: their shape flags are among the lines."""
    first, second = (_last_revision(r) for r in (a, b))
    lines = differences(first.get("settings") or {}, second.get("settings") or {})
    for key in VERSIONS:
        old, new = (first.get("environment") or {}).get(key), (second.get("environment") or {}).get(key)
        if old != new:
            lines.append(f"{key}: {old} → {new}")
    return lines or ["no setting differs"]


def _last_revision(record: dict) -> dict:
    revisions = record.get("revisions") or []
    if not revisions or not isinstance(revisions[-1], dict):
        raise ShowtellError(f"run {record.get('run_id', '?')}: its record has no revision to compare")
    return revisions[-1]
