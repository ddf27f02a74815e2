"""What the evaluator does next — decided from what it has read, without reading anything.

The controller (``evaluator/loop/controller.py``) reads the state file, the run and the history,
and asks these functions what follows: which checkpoints to evaluate and in what order, when to
look again at one whose files are still arriving, which ones to record skipped and why.  No I/O,
no threads, no clock of their own: every scheduling rule is a table test (``tests/test_schedule.py``).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from showtell.api.contract import POLICIES
from showtell.common.model_dir import ModelDir

MAX_RETRY_SECS = 10.0  # longest wait between looks at a checkpoint whose files are still arriving
FIRST_RETRY_SECS = 0.5  # the first look again; doubled each time up to MAX_RETRY_SECS


@dataclass(frozen=True, order=True)
class Checkpoint:
    step: int
    prefix: str


@dataclass(frozen=True)
class Retry:
    """Look at the checkpoint again at monotonic time ``at`` (the ``attempts``-th time)."""
    at: float
    attempts: int


@dataclass(frozen=True)
class Skip:
    """Record the checkpoint skipped: it will never be evaluated, and ``reason`` says why."""
    checkpoint: Checkpoint
    reason: str


def to_evaluate(named: Iterable[str], *, recorded: Collection[Checkpoint], newest_recorded: int | None,
                policy: str) -> list[Checkpoint]:
    """The named checkpoints to evaluate, in step order.

    ``all``: every named one without a record.  ``latest``: only the newest named one, and only
    when it is newer than the newest recorded step — while the evaluator is behind, the ones in
    between are passed over (not recorded: they were never its job).
    """
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r} is not one of {POLICIES}")
    todo = sorted(c for c in {Checkpoint(ModelDir.step_of(p), p) for p in named} if c not in recorded)
    if policy == "latest" and todo:
        newest = todo[-1]
        return [newest] if newest_recorded is None or newest.step > newest_recorded else []
    return todo


def vanished(seen: Mapping[str, int], named: Collection[str], *, evaluating: str | None,
             recorded: Collection[Checkpoint]) -> list[Skip]:
    """Checkpoints the watcher saw named (``seen``: prefix → step) that are no longer named and
    have no record: the trainer's ``--keep`` deleted them while the evaluator was busy.  The one
    being evaluated is not among them (it is pinned: its evaluation records it)."""
    gone = sorted(Checkpoint(step, prefix) for prefix, step in seen.items()
                  if prefix not in named and prefix != evaluating)
    return [Skip(c, f"{c.prefix}: deleted by the trainer before it could be evaluated (named by the "
                    "state file, then no longer: --keep)") for c in gone if c not in recorded]


def not_arrived(checkpoint: Checkpoint, reason: str, *, named: bool, first_seen: float, attempts: int,
                now: float, arrival_timeout: float) -> Retry | Skip:
    """A checkpoint whose files could not all be read.  Still named by the state file: not
    arrived yet (a synced copy delivers the state file first) — look again with a doubling
    backoff, until ``arrival_timeout`` seconds after ``first_seen``.  No longer named: deleted."""
    if not named:
        return Skip(checkpoint, f"{checkpoint.prefix}: deleted by the trainer before it could be evaluated "
                                "(no longer named by the state file)")
    waited = now - first_seen
    if waited >= arrival_timeout:
        return Skip(checkpoint, f"{reason}; still incomplete after {waited:.0f} s "
                                f"(--arrival-timeout {arrival_timeout:g})")
    return Retry(at=now + min(FIRST_RETRY_SECS * 2 ** attempts, MAX_RETRY_SECS), attempts=attempts + 1)


def leftover_pins(names: Iterable[str], *, model_dir: str, named: Collection[str],
                  recorded: Collection[Checkpoint]) -> list[Skip]:
    """Pins a stopped evaluator left behind (``names`` of the pin directories), each an
    evaluation cut short.  One still named is simply pending again; one the trainer deleted
    since will never be named again, so it is recorded skipped now."""
    skips = []
    for name in sorted(names):
        prefix = os.path.join(model_dir, name)
        checkpoint = Checkpoint(ModelDir.step_of(prefix), prefix)
        ours = name.startswith(f"{ModelDir.CHECKPOINT_NAME}-")
        if ours and prefix not in named and checkpoint not in recorded:
            skips.append(Skip(checkpoint, f"{prefix}: its evaluation was cut short (the evaluator stopped) "
                                          "and the trainer deleted it since"))
    return skips
