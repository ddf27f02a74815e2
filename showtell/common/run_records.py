"""A model dir's run records (``<model-dir>/runs/<run id>.json``, which ``showtell train`` writes:
every setting as resolved, a revision per resume, each start's end), read without TensorFlow.

The light client (``pip install '.[client]'``) lists, shows and diffs runs from a model dir with
these; the evaluator serves the same facts over gRPC (``ListRuns``, ``GetRun``) from its own
read-only view of the model dir.  The file names of a model dir live here too, so the model
code (``captioning/model/modeldir.py``) and the client name them the same way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from showtell.common.errors import ShowtellError, UsageError

log = logging.getLogger(__name__)

RUNS = "runs"  # <model-dir>/runs/<run id>.json: each run's whole configuration (trainer/run_config.py)
METADATA = "showtell-model.json"  # the model's shape, its vocabulary's origin, the current run id
CHECKPOINT_NAME = "ckpt"  # CheckpointManager's prefix: ckpt-<global step>

# Flags that say where or how a process runs, not what it trains: not compared between runs.
PLACEMENT = ("ps_hosts", "worker_hosts", "chief_host", "job_name", "task_index", "log_device_placement",
             "verbose", "evaluator", "evaluator_ca", "evaluator_auth_token_file", "evaluator_tls_server_name",
             "profile_steps", "print_config")
VERSIONS = ("showtell", "tensorflow", "keras", "python")


def checkpoint_step(path: str) -> int:
    """``…/ckpt-1200`` → 1200 (CheckpointManager names checkpoints by global step); -1 otherwise."""
    try:
        return int(str(path).rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1


def checkpoint_steps(model_dir: Path) -> list[int]:
    """Steps of the complete-looking checkpoints on disk (an ``.index`` file), whether the state
    file names them or not; ascending."""
    steps = (checkpoint_step(p.name[:-len(".index")]) for p in model_dir.glob(f"{CHECKPOINT_NAME}-*.index"))
    return sorted(s for s in steps if s >= 0)


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


def load(path: Path) -> dict:
    """A run record read from a local file; one line naming it when unreadable."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ShowtellError(f"{path}: unreadable run record ({exc}); move it aside") from exc
    if not isinstance(record, dict):
        raise ShowtellError(f"{path}: not a run record (a JSON object); move it aside")
    return record


def current_run_id(model_dir: Path) -> str | None:
    """The run id ``showtell-model.json`` names (None: no record, or one being replaced)."""
    try:
        return str(json.loads((model_dir / METADATA).read_text()).get("run_id", ""))
    except (OSError, ValueError, AttributeError):
        return None


def find(run_id: str, dirs: Iterable[str]) -> dict:
    """A run's record from the first of ``dirs`` that holds it."""
    dirs = list(dirs)
    for d in dirs:
        path = Path(d) / RUNS / f"{run_id}.json"
        if path.is_file():
            return load(path)
    raise UsageError(f"run {run_id}: not recorded in {', '.join(dirs)} (showtell runs DIR lists them)")


def _shown(value: Any) -> str:
    return "unset" if value is None else json.dumps(value) if not isinstance(value, str) else value


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``--flag: old → new`` for every setting that differs (where the process runs aside)."""
    keys = sorted((set(old) | set(new)) - set(PLACEMENT))
    return [f"--{k.replace('_', '-')}: {_shown(old.get(k))} → {_shown(new.get(k))}"
            for k in keys if old.get(k) != new.get(k)]


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
