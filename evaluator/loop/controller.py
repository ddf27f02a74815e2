"""The evaluator's outer loop, in the shape of the trainer's ``Controller`` (and Orbit's): it
alone decides, and it alone writes the ``Status``.

The watcher only wakes it.  Each wake-up is one ``look_at`` the model dir (no side effects);
``schedule`` turns that look and the history into what to evaluate, skip, or retry when;
``Attempts`` pins, evaluates and unpins one checkpoint; the ``Recorder`` makes its record durable
and runs the actions (log, summaries, broadcast, best export).  The controller keeps what
outlives one look: the current run, the arrival retries, policy ``all``'s ``SeenCheckpoints``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import tensorflow as tf

from showtell.common.model_dir import ModelDir
from showtell.evaluator.config import Finish
from showtell.evaluator.loop import schedule
from showtell.evaluator.loop.attempts import Attempts, NotArrived
from showtell.evaluator.loop.look import Look, look_at
from showtell.evaluator.loop.protocol import Evaluator
from showtell.evaluator.loop.schedule import Checkpoint, Retry, Skip
from showtell.evaluator.loop.seen import SeenCheckpoints, recorded
from showtell.evaluator.loop.sizing import RunSizes
from showtell.evaluator.loop.status import ProgressReport, Status, WaitingForParts
from showtell.evaluator.records.record import Record
from showtell.evaluator.records.recorder import WORK_DIR_RETRY_SECS, Action, Recorder
from showtell.evaluator.records.store import Store

log = logging.getLogger(__name__)

# The work dir's own trouble: not the checkpoint's fault, so retried rather than recorded.
WORK_DIR_ERRORS = (OSError, sqlite3.Error, tf.errors.ResourceExhaustedError)


class Merge(Protocol):
    """Part 0's merger of a split evaluation (``loop/merger.py``), as the loop calls it."""

    parts_count: int
    waiting: tuple[WaitingForParts, ...]  # as of the last call

    def __call__(self) -> object: ...


class EvalController:
    def __init__(self, *, model_dir: ModelDir, evaluator: Evaluator, store: Store, recorder: Recorder,
                 pins: Path, policy: str, actions: Sequence[Action] = (), finish: Finish | None = None,
                 arrival_timeout: float = 300.0, progress_log_secs: float = 30.0,
                 sizes: RunSizes | None = None, clock: Callable[[], float] = time.monotonic,
                 merge: Merge | None = None, records: Store | None = None) -> None:
        """
        Args:
          model_dir: the trainer's model directory (local path or ``tf.io.gfile`` URL).
          evaluator: restores and validates one checkpoint.
          store: the history, read to tell what is recorded (written only by ``recorder``).
          recorder: makes every record durable, then runs ``actions`` on it.
          pins: where checkpoints are pinned while evaluated (``WorkDir.pins``).
          policy: ``latest`` or ``all`` (``schedule.to_evaluate``).
          actions: told about each record stored (``evaluator/records/actions.py``), in order.
          finish: when to stop by itself (default: never).
          arrival_timeout: seconds a checkpoint named by the state file may stay incomplete (a
            synced copy still arriving) before it is recorded skipped.
          progress_log_secs: how often a long evaluation logs how far it is.
          sizes: ``--max-eval-examples auto``: each run's size, chosen at its first evaluation.
          clock: monotonic seconds (tests pass a fake).
          merge: part 0 of a split evaluation (``--shard 0/N``): merges what every part has
            published, after each of its own evaluations and each look (``loop/merger.py``).
          records: where a checkpoint counts as evaluated for ``--exit-when-trained`` (part 0: the
            merged history; default ``store``).
        """
        if policy not in schedule.POLICIES:
            raise ValueError(policy)
        self.model_dir, self.evaluator, self.store, self.recorder = model_dir, evaluator, store, recorder
        self.actions, self.policy, self.finish, self.clock = list(actions), policy, finish or Finish(), clock
        self.arrival_timeout, self.progress_log_secs, self.sizes = arrival_timeout, progress_log_secs, sizes
        self.records = records or store
        self.attempts = Attempts(evaluator=evaluator, pins=pins)
        self.seen = SeenCheckpoints(store=store, skip=self._skip)
        self.status = Status()  # replaced whole, on the loop's thread only
        self.merge = self._merging(merge)
        self.wake, self.stopping = threading.Event(), threading.Event()
        self._published = threading.Event()  # another part published (a split evaluation's part 0)
        self.evaluations = 0  # by this process (ok or failed; a skipped checkpoint is not one)
        self.done: str | None = None  # why the loop ended by itself
        self.retry_at: float | None = None  # when to look again without being woken
        self._run: str | None = None  # the current run, once known
        self._named: tuple[str, ...] = ()  # what the last look found named
        self._arrivals: dict[str, tuple[float, int]] = {}  # prefix → (first seen incomplete, attempts)

    @property
    def pins(self) -> Path:
        return self.attempts.pins

    def _update(self, **changes) -> None:
        self.status = dataclasses.replace(self.status, **changes)

    # -- the watcher's thread -------------------------------------------------------------------

    def on_change(self) -> None:
        """The watcher saw the model dir change: note what is named (policy all), wake the loop."""
        if self.policy == "all":
            seen = look_at(self.model_dir, finished=False)
            if seen.run is not None and seen.named is not None:
                self.seen.note(seen.named, seen.run)
        self.wake.set()

    def _merging(self, merge: Merge | None) -> Callable[[], None]:
        """``merge``, then the status of what waits for parts."""
        if merge is None:
            return lambda: None
        self._update(parts=merge.parts_count)

        def merged() -> None:
            merge()
            self._update(waiting_for_parts=merge.waiting)

        return merged

    def on_published(self) -> None:
        """Another part published (the parts dir's watcher): merge at this evaluation's next batch,
        or at the next look — a merge does not wait for part 0's own evaluation to end."""
        self._published.set()
        self.wake.set()

    def _progress(self, progress) -> None:
        self._update(progress=progress)
        if self._published.is_set():
            self._published.clear()
            self.merge()

    def stop(self) -> None:
        """Stop after the current evaluation (which is abandoned unrecorded if still running when
        the service closes the recorder)."""
        self.stopping.set()
        self.wake.set()

    # -- the loop -------------------------------------------------------------------------------

    def run(self, poll_fallback_secs: float = 30.0) -> str | None:
        """Evaluate until stopped (None) or a ``finish`` condition holds (its reason).  Sleeps
        between the watcher's wake-ups; the fallback timer only guards against a lost event."""
        self.evaluator.open()
        first = look_at(self.model_dir, finished=False)
        if first.named is not None:
            self._settle_leftovers(set(first.named), self._follow(first.run))
        self.wake.set()
        while not self.stopping.is_set():
            timeout = poll_fallback_secs
            if self.retry_at is not None:
                timeout = max(0.0, min(timeout, self.retry_at - self.clock()))
            self.wake.wait(timeout=timeout)
            self.wake.clear()
            seen = self.look()
            trained = seen.finished["step"] if seen.finished else -1
            if trained != self.status.trained_step:  # a finished trainer is not down (Prometheus)
                self._update(trained_step=trained)
            if self.finish.when_trained and not self.done:
                self.done = self._trained(seen.finished)
            if self.done:
                log.info("done: %s", self.done)
                return self.done
        return None

    def look(self) -> Look:
        """One pass: evaluate what the schedule says is due, in order, until something has to
        wait (files still arriving, the work dir's trouble), a finish condition holds, or — policy
        latest — one evaluation is done (the newest may have moved on meanwhile)."""
        self.retry_at = None
        seen = look_at(self.model_dir)
        try:
            todo = self._due(seen)
        except WORK_DIR_ERRORS as exc:  # recording a vanished checkpoint skipped
            self.retry_at = self._trouble(-1, exc)
            return seen
        for checkpoint in todo:
            if self.stopping.is_set():
                break
            outcome = self._attempt(checkpoint)
            self.merge()  # its own part may have been the last one in
            if isinstance(outcome, Retry):
                self.retry_at = outcome.at  # files still arriving, or the work dir's trouble
                break
            if outcome is None:
                continue  # the watcher's thread recorded it meanwhile
            if outcome.status != "skipped":
                self.evaluations += 1
                self.done = self.finish.reason(outcome, self.evaluations)
            if self.done:
                break
            if self.policy == "latest":
                self.wake.set()
                break
        self.merge()  # what the other parts published meanwhile
        return seen

    def _due(self, seen: Look) -> list[Checkpoint]:
        """What ``seen`` says is to evaluate now, in order; the status shows what was read."""
        if seen.named is None:
            if seen.state_error != self.status.state_error:
                log.error("%s", seen.state_error)
            self._update(state_error=seen.state_error)
            return []
        run = self._follow(seen.run)
        self._named = seen.named
        self.seen.vanished(set(seen.named))
        newest = self.store.latest(run)
        todo = schedule.to_evaluate(seen.named, recorded=recorded(self.store, run, seen.named),
                                    policy=self.policy, newest_recorded=newest.step if newest else None)
        newest_named = seen.newest_step
        changes = {}
        if newest_named is not None and newest_named != self.status.last_seen_step:
            newest = max(seen.named, key=ModelDir.step_of)
            changes = {"last_seen_step": newest_named, "newest_saved_at": ModelDir.saved_at(newest)}
        self._update(state_error="", run_id=run, pending_steps=tuple(c.step for c in todo), **changes)
        return todo

    def _follow(self, run: str | None) -> str:
        """The current run after reading ``run`` (None: keep the one known); logs a new one."""
        if run is None or run == self._run:
            return self._run or ""
        newest = self.store.latest()
        previous = self._run if self._run is not None else (newest.run if newest else run)
        if previous != run:
            log.info("a new run began in %s: run %s (was %s); its checkpoints are evaluated afresh",
                     self.model_dir, run or "''", previous or "''")
        self._run, self._arrivals = run, {}
        self._update(run_id=run)
        return run

    def _attempt(self, checkpoint: Checkpoint) -> Record | Retry | None:
        """Evaluate ``checkpoint`` and keep its record; a Retry if it has to wait; None if the
        watcher's thread recorded it meanwhile."""
        run = self.status.run_id
        with self.seen.claim(checkpoint, run) as claimed:
            if not claimed:
                return None
            report = ProgressReport(checkpoint.step, publish=self._progress,
                                    log_secs=self.progress_log_secs, clock=self.clock)
            self._update(evaluating_step=checkpoint.step, progress=None)
            try:
                images = self.sizes.for_run(run, self._named, self.model_dir) if self.sizes else None
                outcome = self.attempts.evaluate(checkpoint, run, progress=report, images=images)
                if isinstance(outcome, NotArrived):
                    kept = self._not_arrived(outcome, run)
                else:
                    self._arrivals.pop(checkpoint.prefix, None)
                    kept = self._keep(outcome)
            except WORK_DIR_ERRORS as exc:
                return Retry(at=self._trouble(checkpoint.step, exc), attempts=0)
            finally:
                self._update(evaluating_step=-1, progress=None)
        if isinstance(kept, Record) and self.status.work_error:
            log.info("--work-dir %s takes records again", self.recorder.work_root)
            self._update(work_error="")
        return kept

    def _not_arrived(self, missing: NotArrived, run: str) -> Record | Retry:
        """Look again whether the state file still names it; ``schedule.not_arrived`` decides."""
        checkpoint = missing.checkpoint
        again = look_at(self.model_dir, finished=False)
        named = again.named is None or checkpoint.prefix in again.named  # unreadable: look again later
        now = self.clock()
        first, attempts = self._arrivals.get(checkpoint.prefix, (now, 0))
        decision = schedule.not_arrived(checkpoint, missing.reason, named=named, first_seen=first,
                                        attempts=attempts, now=now, arrival_timeout=self.arrival_timeout)
        if isinstance(decision, Retry):
            self._arrivals[checkpoint.prefix] = (first, decision.attempts)
            (log.info if attempts == 0 else log.debug)(
                "%s; named by the state file, so not arrived yet: retrying in %.1f s "
                "(for up to --arrival-timeout %g s)", missing.reason, decision.at - now, self.arrival_timeout)
            return decision
        self._arrivals.pop(checkpoint.prefix, None)
        return self._skip(decision, run, mtime=missing.mtime)

    def _skip(self, skip: Skip, run: str, mtime: float = 0.0) -> Record:
        """Record ``skip``'s checkpoint skipped (also from the watcher's thread)."""
        checkpoint = skip.checkpoint
        record = Record.skipped(checkpoint.step, checkpoint.prefix, skip.reason, run=run, mtime=mtime)
        return self._keep(record)

    def _keep(self, record: Record) -> Record:
        """Make ``record`` durable and run the actions on it; the stored version, or ``record``
        itself when nothing new was stored (stopping, or already recorded)."""
        stored = self.recorder.record(record, self.actions)
        return stored or record

    def _trouble(self, step: int, exc: Exception) -> float:
        """The work dir failed (a full disk): say so once, show it, try again later."""
        message = self.recorder.trouble(step, exc)
        if message != self.status.work_error:
            log.error("%s", message)
        self._update(work_error=message)
        return self.clock() + WORK_DIR_RETRY_SECS

    def _settle_leftovers(self, named: set[str], run: str) -> None:
        """Pins a stopped evaluator left behind: recorded skipped if deleted since, then removed."""
        names = self.attempts.leftovers()
        prefixes = [self.model_dir.file(n) for n in names]
        for skip in schedule.leftover_pins(names, model_dir=self.model_dir.root, named=named,
                                           recorded=recorded(self.store, run, prefixes)):
            self._skip(skip, run)
        self.attempts.clear(names)

    def _trained(self, final: dict | None) -> str | None:
        """Why the job is done if the trainer marked its final checkpoint and it is recorded."""
        if final is None:
            return None
        # Its evaluation may still be to come: the state file's rename (or, if it was evaluated
        # before the marker landed, the marker's own arrival) wakes the loop again.
        if not any(r.step == final["step"] and os.path.basename(r.checkpoint) == final["checkpoint"]
                   for r in self.records.after(final["step"] - 1, run=self.status.run_id)):
            return None
        return f"the trainer finished ({final.get('reason', '?')}) and its final checkpoint, step " \
               f"{final['step']}, is evaluated"
