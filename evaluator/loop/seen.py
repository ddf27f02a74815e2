"""Policy ``all``: every checkpoint a state file named, as seen — so one the trainer's ``--keep``
deleted while the loop was busy evaluating another is recorded skipped, not lost.

Two threads use it: the watcher's notes what is named and records at once what vanished (an
evaluator killed before the loop is free would otherwise forget what it saw); the loop notes each
look and claims each checkpoint before evaluating it.  One lock covers both and is held while
recording, so the loop never starts on a checkpoint the watcher's thread has just recorded.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from showtell.common.model_dir import ModelDir
from showtell.evaluator.loop import schedule
from showtell.evaluator.loop.schedule import Checkpoint, Skip
from showtell.evaluator.records.store import Store

log = logging.getLogger(__name__)


def recorded(store: Store, run: str, prefixes: Iterable[str]) -> set[Checkpoint]:
    """The checkpoints among ``prefixes`` that have a record in ``run``."""
    checkpoints = (Checkpoint(ModelDir.step_of(p), p) for p in prefixes)
    return {c for c in checkpoints if store.has(run, c.step, c.prefix)}


class SeenCheckpoints:
    def __init__(self, *, store: Store, skip: Callable[[Skip, str], object]) -> None:
        """
        Args:
          store: the history, read to tell what is recorded.
          skip: records ``(skip, run)`` (the controller's; it may raise the work dir's trouble).
        """
        self.store, self.skip = store, skip
        self._seen: dict[str, tuple[int, str]] = {}  # prefix → (step, run) when first named
        self._lock = threading.Lock()
        self._evaluating: str | None = None  # claimed by the loop: its evaluation records it

    def note(self, named: Iterable[str], run: str) -> None:
        """``named`` were read in ``run``: remember them, record what has vanished."""
        named = set(named)
        with self._lock:
            for prefix in named:
                self._seen.setdefault(prefix, (ModelDir.step_of(prefix), run))
        try:
            self.vanished(named)
        except (sqlite3.Error, OSError) as exc:  # the loop reports the work dir's trouble
            log.debug("recording vanished checkpoints later: %s", exc)

    def vanished(self, named: set[str]) -> None:
        """Record skipped each checkpoint seen before, no longer named, and without a record."""
        with self._lock:
            by_run: dict[str, dict[str, int]] = {}
            for prefix, (step, run) in self._seen.items():
                by_run.setdefault(run, {})[prefix] = step
            for run, seen in by_run.items():
                skips = schedule.vanished(seen, named, evaluating=self._evaluating,
                                          recorded=recorded(self.store, run, seen))
                for prefix in seen:
                    if prefix not in named and prefix != self._evaluating:
                        del self._seen[prefix]
                for skip in skips:
                    self.skip(skip, run)

    @contextmanager
    def claim(self, checkpoint: Checkpoint, run: str) -> Iterator[bool]:
        """While the loop evaluates ``checkpoint``: False if it was recorded meanwhile."""
        with self._lock:
            claimed = not self.store.has(run, checkpoint.step, checkpoint.prefix)
            if claimed:
                self._evaluating = checkpoint.prefix
        try:
            yield claimed
        finally:
            if claimed:
                self._evaluating = None
