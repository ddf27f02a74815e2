"""The evaluation loop: read what the model dir names, ask the schedule what to do, do it.

In the shape of the trainer's ``Controller``: the watcher only wakes the loop; each look reads
the state file, the run and the history, and ``schedule`` decides (evaluate, look again at T,
skip with a reason); each evaluation pins the checkpoint, evaluates it and hands the outcome to
the ``Recorder`` — ok, failed (corrupt file, other model, bad data) or skipped (deleted before it
could be pinned, never complete) — so nothing is retried forever and nothing is lost.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import tensorflow as tf

from showtell.captioning.model.modeldir import (
    METADATA,
    checkpoint_step,
    read_finished,
    read_run_id,
    read_state,
)
from showtell.common.errors import ModelDirIncomplete, ShowtellError
from showtell.evaluator import schedule, sizing
from showtell.evaluator.config import Finish
from showtell.evaluator.evaluation import EvalResult
from showtell.evaluator.pinning import Missing, files_state, pin, unpin
from showtell.evaluator.recorder import Recorder
from showtell.evaluator.schedule import Checkpoint, Retry, Skip
from showtell.evaluator.sizing import RunSizes
from showtell.evaluator.status import Progress
from showtell.evaluator.store import Record, Store

log = logging.getLogger(__name__)


class Evaluator(Protocol):
    """Restores and validates one checkpoint (``evaluation.CheckpointEvaluator``)."""

    model: Any  # the model as of the last evaluation, for --export-best
    vocab: Any

    def open(self) -> None: ...

    def evaluate(self, path: str, step: int | None = None,
                 progress: Callable[[int, int], None] | None = None,
                 images: int | Callable[[float | None, int, int], int] | None = None) -> EvalResult: ...


class EvalRunner:
    def __init__(self, *, model_dir: str, evaluator: Evaluator, store: Store, recorder: Recorder, pins: Path,
                 policy: str, finish: Finish | None = None, arrival_timeout: float = 300.0,
                 progress_log_secs: float = 30.0, sizes: RunSizes | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """
        Args:
          model_dir: the trainer's model directory (local path or ``tf.io.gfile`` URL).
          evaluator: restores and validates one checkpoint.
          store: the history, read to tell what is recorded (written only by ``recorder``).
          recorder: makes every record durable and tells everyone about it.
          pins: where checkpoints are pinned while evaluated (``WorkDir.pins``).
          policy: ``latest`` or ``all`` (``schedule.to_evaluate``).
          finish: when to stop by itself (default: never).
          arrival_timeout: seconds a checkpoint named by the state file may stay incomplete (a
            synced copy still arriving) before it is recorded skipped.
          progress_log_secs: how often a long evaluation logs how far it is.
          sizes: ``--max-eval-examples auto``: each run's size, chosen at its first evaluation.
          clock: monotonic seconds (tests pass a fake).
        """
        if policy not in schedule.POLICIES:
            raise ValueError(policy)
        self.model_dir, self.evaluator, self.store, self.recorder = model_dir, evaluator, store, recorder
        self.pins, self.policy, self.finish = pins, policy, finish or Finish()
        self.arrival_timeout, self.clock = arrival_timeout, clock
        self.progress_log_secs, self.sizes = progress_log_secs, sizes
        self._progress_logged = 0.0
        self.status = recorder.status
        self.wake, self.stopping = threading.Event(), threading.Event()
        self.evaluations = 0  # by this process (ok or failed; a skipped checkpoint is not one)
        self.done: str | None = None  # why the loop ended by itself
        self.retry_at: float | None = None  # when to look again without being woken
        self._arrivals: dict[str, tuple[float, int]] = {}  # prefix → (first seen incomplete, attempts)
        self._run_known = False
        # policy all: every checkpoint a state file named (prefix → step, run) as the watcher saw it
        # — so one named and deleted (--keep) while an evaluation ran is recorded skipped, not lost.
        self._seen: dict[str, tuple[int, str]] = {}
        self._seen_lock = threading.Lock()
        self._evaluating: str | None = None  # pinned and being evaluated: its evaluation records it

    # -- the watcher's thread -------------------------------------------------------------------

    def on_change(self) -> None:
        """The watcher saw the model dir change: note what is named (policy all), wake the loop."""
        if self.policy == "all":
            try:
                named, run = read_state(self.model_dir), read_run_id(self.model_dir)
            except (ShowtellError, OSError, tf.errors.OpError):
                named, run = [], None  # being replaced: the loop reads it again anyway
            if run is not None:
                with self._seen_lock:
                    for prefix in named:
                        self._seen.setdefault(prefix, (checkpoint_step(prefix), run))
                # Recorded now, from this thread, not when the loop is next free: an evaluator
                # killed meanwhile would otherwise forget what it saw.
                try:
                    self._record_vanished(set(named))
                except (sqlite3.Error, OSError) as exc:  # the loop reports the work dir's trouble
                    log.debug("recording vanished checkpoints later: %s", exc)
        self.wake.set()

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
        self._settle_leftover_pins()
        self.wake.set()
        while not self.stopping.is_set():
            timeout = poll_fallback_secs
            if self.retry_at is not None:
                timeout = max(0.0, min(timeout, self.retry_at - self.clock()))
            self.wake.wait(timeout=timeout)
            self.wake.clear()
            self.look()
            self.done = self.done or self._trained()
            if self.done:
                log.info("done: %s", self.done)
                return self.done
        return None

    def look(self) -> None:
        """One pass: evaluate what the schedule says is due, in order, until something has to
        wait (files still arriving, the work dir's trouble), a finish condition holds, or — policy
        latest — one evaluation is done (the newest may have moved on meanwhile)."""
        self.retry_at = None
        for checkpoint in self.pending():
            if self.stopping.is_set():
                return
            if not self._claim(checkpoint):
                continue  # the watcher's thread recorded it meanwhile
            try:
                record = self._evaluate(checkpoint)
            except (OSError, sqlite3.Error, tf.errors.ResourceExhaustedError) as exc:
                self.retry_at = self.recorder.trouble(checkpoint.step, exc)
                return
            finally:
                self._evaluating = None
            if record is None:
                return  # files still arriving: look again at retry_at, in step order
            if record.status != "skipped":
                self.evaluations += 1
                self.done = self.finish.reason(record, self.evaluations)
            if self.done:
                return
            if self.policy == "latest":
                self.wake.set()
                return

    def pending(self) -> list[Checkpoint]:
        """The checkpoints to evaluate now, in order (``schedule.to_evaluate``)."""
        try:
            named = read_state(self.model_dir)
            self.status.state_error = ""
        except ShowtellError as exc:
            if str(exc) != self.status.state_error:
                log.error("%s", exc)
            self.status.state_error = str(exc)
            return []
        run = self._current_run()
        self._record_vanished(set(named))
        if named:
            self.status.last_seen_step = max(checkpoint_step(p) for p in named)
        newest = self.store.latest(run)
        todo = schedule.to_evaluate(named, recorded=self._recorded(run, named), policy=self.policy,
                                    newest_recorded=newest.step if newest else None)
        self.status.pending_steps = [c.step for c in todo]
        return todo

    def _recorded(self, run: str, prefixes: Any) -> set[Checkpoint]:
        checkpoints = (Checkpoint(checkpoint_step(p), p) for p in prefixes)
        return {c for c in checkpoints if self.store.has(run, c.step, c.prefix)}

    def _record_vanished(self, named: set[str]) -> None:
        with self._seen_lock:  # held while recording: the loop never starts on one recorded here
            by_run: dict[str, dict[str, int]] = {}
            for prefix, (step, run) in self._seen.items():
                by_run.setdefault(run, {})[prefix] = step
            for run, seen in by_run.items():
                skips = schedule.vanished(seen, named, evaluating=self._evaluating,
                                          recorded=self._recorded(run, seen))
                for prefix in seen:
                    if prefix not in named and prefix != self._evaluating:
                        del self._seen[prefix]
                for skip in skips:
                    self._skip(skip, run=run, ends_evaluation=False)

    def _current_run(self) -> str:
        """The model dir's run (its ``showtell-model.json``); logs when a new one begins."""
        run = read_run_id(self.model_dir)
        if run is None or (self._run_known and run == self.status.run_id):
            return self.status.run_id
        newest = self.store.latest()
        previous = self.status.run_id if self._run_known else (newest.run if newest else run)
        if previous != run:
            log.info("a new run began in %s: run %s (was %s); its checkpoints are evaluated afresh",
                     self.model_dir, run or "''", previous or "''")
        self.status.run_id, self._run_known = run, True
        self._arrivals.clear()
        return run

    def _settle_leftover_pins(self) -> None:
        """Pins a stopped evaluator left behind: recorded skipped if deleted since, then removed."""
        try:
            leftovers, named = list(self.pins.iterdir()), set(read_state(self.model_dir))
        except (OSError, ShowtellError):
            return
        run = self._current_run()
        names = [p.name for p in leftovers]
        seen = [os.path.join(self.model_dir, n) for n in names]
        for skip in schedule.leftover_pins(names, model_dir=self.model_dir, named=named,
                                           recorded=self._recorded(run, seen)):
            self._skip(skip, run=run)
        for leftover in leftovers:
            shutil.rmtree(leftover, ignore_errors=True)

    def _trained(self) -> str | None:
        """--exit-when-trained: the trainer marked its final checkpoint, and it is recorded."""
        if not self.finish.when_trained:
            return None
        final = read_finished(self.model_dir)
        if final is None:
            return None
        # Its evaluation may still be to come: the state file's rename (or, if it was evaluated
        # before the marker landed, the marker's own arrival) wakes us again.
        if not any(r.step == final["step"] and os.path.basename(r.checkpoint) == final["checkpoint"]
                   for r in self.store.after(final["step"] - 1, run=self.status.run_id)):
            return None
        return f"the trainer finished ({final.get('reason', '?')}) and its final checkpoint, step " \
               f"{final['step']}, is evaluated"

    # -- one checkpoint -------------------------------------------------------------------------

    def _claim(self, checkpoint: Checkpoint) -> bool:
        """Mark ``checkpoint`` as being evaluated, unless the watcher's thread recorded it."""
        with self._seen_lock:
            if self.store.has(self.status.run_id, checkpoint.step, checkpoint.prefix):
                return False
            self._evaluating = checkpoint.prefix
            return True

    def _evaluate(self, checkpoint: Checkpoint) -> Record | None:
        """Pin, evaluate, record, unpin.  None: the checkpoint's files are not all there yet
        (or were changing while read) and it is still named — ``retry_at`` says when to look."""
        step, prefix, run = checkpoint.step, checkpoint.prefix, self.status.run_id
        self.status.begin(step)
        started = time.time()
        mtime = _mtime(prefix + ".index")
        before = files_state(prefix)
        try:
            pinned = pin(prefix, self.pins)
        except Missing as exc:
            return self._not_arrived(checkpoint, str(exc), mtime)
        try:
            log.info("evaluating %s (step %d)", prefix, step)
            self._progress_logged = self.clock()
            result = self.evaluator.evaluate(pinned, step=step, progress=self._progress,
                                             images=self._images(run))
            record = Record(step, prefix, mtime, time.time(), result.seconds, result.examples,
                            metrics=result.metrics, samples=result.samples, run=run, scoring=result.scoring)
        except ModelDirIncomplete as exc:  # e.g. showtell-model.json not synced yet
            return self._not_arrived(checkpoint, str(exc), mtime)
        except ShowtellError as exc:
            if files_state(prefix) != before:  # still being written (a sync, a slow copy): not a failure
                return self._not_arrived(checkpoint, f"{prefix}: its files changed while being read", mtime)
            log.error("%s", exc)
            record = Record.failed(step, prefix, str(exc).replace(pinned, prefix), run=run, mtime=mtime,
                                   seconds=time.time() - started)
        finally:
            unpin(pinned)
        self._arrivals.pop(prefix, None)
        recorded = self.recorder.record(record)
        self.recorder.export(record, self.evaluator.model, self.evaluator.vocab)
        return recorded

    def _images(self, run: str) -> int | Callable[[float | None, int, int], int] | None:
        """``--max-eval-examples auto``: the run's size, or how the evaluation decides it."""
        if self.sizes is None:
            return None
        known = self.sizes.get(run)
        if known is not None:
            return known

        def decide(rate: float | None, split_images: int, batch_size: int) -> int:
            if rate is None:
                size = sizing.Size(split_images, f"all {split_images} images: one batch, nothing to time")
            else:
                named = read_state(self.model_dir)
                interval = sizing.checkpoint_interval([_mtime(p + ".index") for p in named],
                                                      _mtime(os.path.join(self.model_dir, METADATA)) or None)
                size = sizing.choose(rate=rate, interval=interval, split_images=split_images,
                                     batch_size=batch_size)
            self.sizes.set(run, size)
            return size.images

        return decide

    def _progress(self, done: int, total: int) -> None:
        """The evaluator's count after each batch: kept for GetStatus, logged now and then (the
        Watch streams hear nothing until the record lands)."""
        now, current = self.clock(), self.status.progress
        progress = Progress.first(done, total, now) if current is None else current.advanced(done, now)
        self.status.progress = progress
        if done < total and now - self._progress_logged >= self.progress_log_secs:
            self._progress_logged = now
            left = progress.seconds_left()
            log.info("evaluating step %d: %d of %d images done%s", self.status.evaluating_step, done, total,
                     "" if left is None else f", about {left:.0f} s left")

    def _not_arrived(self, checkpoint: Checkpoint, reason: str, mtime: float) -> Record | None:
        self.status.end()
        try:
            named = checkpoint.prefix in read_state(self.model_dir)
        except ShowtellError:
            named = True  # a state file being replaced: look again
        now = self.clock()
        first, attempts = self._arrivals.get(checkpoint.prefix, (now, 0))
        decision = schedule.not_arrived(checkpoint, reason, named=named, first_seen=first, attempts=attempts,
                                        now=now, arrival_timeout=self.arrival_timeout)
        if isinstance(decision, Retry):
            self._arrivals[checkpoint.prefix] = (first, decision.attempts)
            self.retry_at = min(self.retry_at or math.inf, decision.at)
            (log.info if attempts == 0 else log.debug)(
                "%s; named by the state file, so not arrived yet: retrying in %.1f s "
                "(for up to --arrival-timeout %g s)", reason, decision.at - now, self.arrival_timeout)
            return None
        self._arrivals.pop(checkpoint.prefix, None)
        return self._skip(decision, run=self.status.run_id, mtime=mtime)

    def _skip(self, skip: Skip, *, run: str, mtime: float = 0.0, ends_evaluation: bool = True) -> Record:
        checkpoint = skip.checkpoint
        return self.recorder.record(Record.skipped(checkpoint.step, checkpoint.prefix, skip.reason, run=run,
                                                   mtime=mtime), ends_evaluation=ends_evaluation)


def _mtime(path: str) -> float:
    try:
        return tf.io.gfile.stat(path).mtime_nsec / 1e9
    except tf.errors.OpError:
        return 0.0
