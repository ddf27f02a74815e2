"""The evaluation service's core: decide what to evaluate, evaluate it, record it.

Orbit-style split: the watcher only wakes us; ``pending()`` reads the state file and
compares it with the store; ``evaluate_one`` pins, evaluates, records and unpins.  Every
outcome — ok, failed (corrupt file, other model, bad data) or skipped (deleted before it
could be pinned) — becomes a row, so nothing is retried forever and nothing is lost.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import sqlite3
import threading
import time

import tensorflow as tf

from showtell.captioning.model.modeldir import (
    CHECKPOINT_NAME,
    checkpoint_step,
    read_finished,
    read_run_id,
    read_state,
)
from showtell.common.errors import ModelDirIncomplete, ShowtellError
from showtell.evaluator.best_export import BestExport
from showtell.evaluator.config import POLICIES, Finish
from showtell.evaluator.evaluation import CheckpointEvaluator
from showtell.evaluator.pinning import Missing, files_state, pin, unpin
from showtell.evaluator.status import Broadcast, Status
from showtell.evaluator.store import Record, Store
from showtell.evaluator.summaries import EvalSummaries
from showtell.evaluator.workdir import WorkDir

log = logging.getLogger(__name__)
MAX_RETRY_SECS = 10.0  # longest wait between looks at a checkpoint whose files are still arriving
# The work dir's own trouble (a full disk, an I/O error): the evaluation is not recorded, the
# service says so in its status and tries again after this long.
WORK_DIR_RETRY_SECS = 10.0


class EvalRunner:
    """Evaluates what the state file names, one checkpoint at a time, until stopped or done.

    Args (keyword-only):
      model_dir: the trainer's model directory (local path or ``tf.io.gfile`` URL).
      evaluator: restores and validates one checkpoint.
      store: the durable history.
      work: this evaluator's own directory (pins live under it).
      policy: ``latest`` or ``all``.
      summaries: TensorBoard writer for successful evaluations (optional).
      exporter: ``--export-best`` (optional).
      finish: when to stop by itself (default: never).
      arrival_timeout: seconds a checkpoint named by the state file may stay incomplete (a
        synced copy still arriving) before it is recorded skipped.
    """

    def __init__(self, *, model_dir: str, evaluator: CheckpointEvaluator, store: Store, work: WorkDir,
                 policy: str, summaries: EvalSummaries | None = None, exporter: BestExport | None = None,
                 finish: Finish | None = None, arrival_timeout: float = 300.0) -> None:
        if policy not in POLICIES:
            raise ValueError(policy)
        self.model_dir, self.store, self.work, self.policy = model_dir, store, work, policy
        self.evaluator = evaluator
        self.summaries = summaries
        self.exporter = exporter
        self.finish = finish or Finish()
        self.status = Status()
        self.broadcast = Broadcast()
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.evaluations = 0  # by this process (ok or failed; a skipped checkpoint is not one)
        self.done: str | None = None  # why the runner ended by itself
        self.arrival_timeout = arrival_timeout
        self._arrivals: dict[str, tuple[float, int]] = {}  # prefix → (first seen incomplete, attempts)
        self._retry_at: float | None = None  # monotonic time of the next look at an incomplete one
        self._run_known = False
        # policy all: every checkpoint a state file named, with its run, as the watcher saw it —
        # so one named and deleted (--keep) while an evaluation ran is recorded skipped, not lost.
        self._seen: dict[str, tuple[int, str]] = {}
        self._seen_lock = threading.Lock()
        self._evaluating: str | None = None  # pinned and being evaluated: the runner records it
        self._recording = threading.Lock()  # one record at a time; ``close`` waits for it
        self.closed = False

    def on_change(self) -> None:
        if self.policy == "all":
            try:
                named, run = read_state(self.model_dir), read_run_id(self.model_dir)
            except (ShowtellError, OSError, tf.errors.OpError):
                named, run = [], None  # being replaced: the runner reads it again anyway
            if run is not None:
                with self._seen_lock:
                    for prefix in named:
                        self._seen.setdefault(prefix, (checkpoint_step(prefix), run))
                # Recorded now, from the watcher's thread, not when the runner is next free: an
                # evaluator killed meanwhile would otherwise forget what it saw.
                try:
                    self._record_vanished(set(named))
                except (sqlite3.Error, OSError) as exc:  # the runner reports the work dir's trouble
                    log.debug("recording vanished checkpoints later: %s", exc)
        self.wake.set()

    def pending(self) -> list[tuple[int, str]]:
        """(step, prefix) of named checkpoints without a record, in step order (policy applied)."""
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
        todo = sorted((checkpoint_step(p), p) for p in named
                      if not self.store.has(run, checkpoint_step(p), p))
        if named:
            self.status.last_seen_step = max(checkpoint_step(p) for p in named)
        if self.policy == "latest" and todo:
            latest = self.store.latest(run)
            todo = [t for t in todo[-1:] if latest is None or t[0] > latest.step]
        self.status.pending_steps = [s for s, _ in todo]
        return todo

    def _record_vanished(self, named: set[str]) -> None:
        """Checkpoints the watcher saw named that are no longer named and were never recorded:
        the trainer's --keep deleted them while this evaluator was busy.  Recorded skipped."""
        with self._seen_lock:  # held while recording: the runner never starts on one recorded here
            gone = [(prefix, step, run) for prefix, (step, run) in self._seen.items()
                    if prefix not in named and prefix != self._evaluating]  # a pinned one is evaluated
            for prefix, step, run in sorted(gone, key=lambda g: g[1]):
                del self._seen[prefix]
                if not self.store.has(run, step, prefix):
                    why = (f"{prefix}: deleted by the trainer before it could be evaluated (named by the "
                           "state file, then no longer: --keep)")
                    self._record(Record.skipped(step, prefix, why, run=run),
                                 evaluating=False)

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

    def run(self, poll_fallback_secs: float = 30.0) -> str | None:
        """Evaluate until ``stopping`` is set or a ``finish`` condition holds (its reason is
        returned).  Sleeps between watcher wake-ups; the fallback timer only guards against a
        lost event."""
        self.wake.set()
        self._settle_leftover_pins()
        while not self.stopping.is_set():
            timeout = poll_fallback_secs
            if self._retry_at is not None:
                timeout = max(0.0, min(timeout, self._retry_at - time.monotonic()))
            self.wake.wait(timeout=timeout)
            self.wake.clear()
            self._retry_at = None
            for step, prefix in self.pending():
                if self.stopping.is_set():
                    return None
                try:
                    record = self.evaluate_one(step, prefix)
                except (OSError, sqlite3.Error, tf.errors.ResourceExhaustedError) as exc:
                    self._work_dir_trouble(step, exc)
                    break
                if record is None:
                    break  # files still arriving: look again after the backoff, in step order
                if record.status != "skipped":
                    self.evaluations += 1
                    self.done = self.finish.reason(record, self.evaluations)
                if self.done:
                    break
                if self.policy == "latest":
                    self.wake.set()  # the newest may have moved on while we were busy
                    break
            self.done = self.done or self._trained()
            if self.done:
                log.info("done: %s", self.done)
                return self.done
        return None

    def _settle_leftover_pins(self) -> None:
        """Pins a stopped evaluator left behind, each an evaluation cut short: one still named is
        simply evaluated again (it is pending); one the trainer deleted since is recorded skipped
        here — no later look at the state file would ever name it again."""
        root = self.work.pins
        try:
            leftovers, named = list(root.iterdir()), set(read_state(self.model_dir))
        except (OSError, ShowtellError):
            return
        run = self._current_run()
        for leftover in leftovers:
            prefix = os.path.join(self.model_dir, leftover.name)
            if leftover.name.startswith(f"{CHECKPOINT_NAME}-") and prefix not in named:
                step = checkpoint_step(prefix)
                if not self.store.has(run, step, prefix):
                    why = (f"{prefix}: its evaluation was cut short (the evaluator stopped) and the trainer "
                           "deleted it since")
                    self._record(Record.skipped(step, prefix, why, run=run))
            shutil.rmtree(leftover, ignore_errors=True)

    def _work_dir_trouble(self, step: int, exc: Exception) -> None:
        """Not the checkpoint's fault: nothing is recorded (so nothing is lost or half-written —
        SQLite rolls the row back), the status says what, and the same checkpoint is tried
        again shortly: the service stays up and recovers by itself once space is back."""
        self.status.evaluating_step = -1
        try:
            free = f"{shutil.disk_usage(self.work.root).free / 2**20:.0f} MB free"
        except OSError:
            free = "free space unknown"
        message = (f"step {step} not evaluated: --work-dir {self.work.root} ({free}): "
                   f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; "
                   f"retrying every {WORK_DIR_RETRY_SECS:g} s")
        if message != self.status.work_error:
            log.error("%s", message)
        self.status.work_error = message
        self._retry_at = time.monotonic() + WORK_DIR_RETRY_SECS

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

    def evaluate_one(self, step: int, prefix: str) -> Record | None:
        """Pin, evaluate, record, unpin.  None: the checkpoint's files are not all there yet
        (or were changing while read) and it is still named — a retry is scheduled."""
        with self._seen_lock:
            run = self.status.run_id
            if self.store.has(run, step, prefix):  # the watcher recorded it meanwhile
                return Record.skipped(step, prefix, "recorded meanwhile by the watcher's thread", run=run)
            self._evaluating = prefix
        try:
            return self._evaluate_one(step, prefix)
        finally:
            self._evaluating = None

    def _evaluate_one(self, step: int, prefix: str) -> Record | None:
        self.status.evaluating_step = step
        started = time.time()
        mtime = _mtime(prefix + ".index")
        before = files_state(prefix)
        try:
            pinned = pin(prefix, self.work.pins)
        except Missing as exc:
            return self._not_there(step, prefix, mtime, str(exc))
        try:
            log.info("evaluating %s (step %d)", prefix, step)
            result = self.evaluator.evaluate(pinned, step=step)
            record = Record(step, prefix, mtime, time.time(), result.seconds, result.examples,
                            metrics=result.metrics, samples=result.samples, run=self.status.run_id,
                            scoring=result.scoring)
        except ModelDirIncomplete as exc:  # e.g. showtell-model.json not synced yet
            return self._not_there(step, prefix, mtime, str(exc))
        except ShowtellError as exc:
            if files_state(prefix) != before:  # still being written (a sync, a slow copy): not a failure
                return self._not_there(step, prefix, mtime, f"{prefix}: its files changed while being read")
            log.error("%s", exc)
            record = Record.failed(step, prefix, str(exc).replace(pinned, prefix), run=self.status.run_id,
                                   mtime=mtime, seconds=time.time() - started)
        finally:
            unpin(pinned)
        self._arrivals.pop(prefix, None)
        recorded = self._record(record)
        if self.exporter is not None and record.status == "ok" and not self.closed:
            try:  # the evaluated model is still in memory
                self.exporter.consider(record, self.evaluator.model, self.evaluator.vocab)
            except (OSError, ValueError, tf.errors.OpError) as exc:
                log.error("--export-best: exporting step %d failed (%s); the previous export stays",
                          record.step, exc)
        return recorded

    def _not_there(self, step: int, prefix: str, mtime: float, reason: str) -> Record | None:
        """Not arrived yet, or gone?  The state file decides: a checkpoint it no longer names was
        deleted by the trainer (recorded skipped); one it still names is retried with backoff
        until ``arrival_timeout`` (then recorded skipped, saying so)."""
        self.status.evaluating_step = -1
        try:
            named = prefix in read_state(self.model_dir)
        except ShowtellError:
            named = True  # a state file being replaced: look again
        now = time.monotonic()
        first, attempts = self._arrivals.get(prefix, (now, 0))
        if named and now - first < self.arrival_timeout:
            delay = min(0.5 * 2 ** attempts, MAX_RETRY_SECS)
            self._arrivals[prefix] = (first, attempts + 1)
            self._retry_at = min(self._retry_at or math.inf, now + delay)
            (log.info if attempts == 0 else log.debug)(
                "%s; named by the state file, so not arrived yet: retrying in %.1f s "
                "(for up to --arrival-timeout %g s)", reason, delay, self.arrival_timeout)
            return None
        self._arrivals.pop(prefix, None)
        why = (f"{reason}; still incomplete after {now - first:.0f} s (--arrival-timeout "
               f"{self.arrival_timeout:g})" if named else
               f"{prefix}: deleted by the trainer before it could be evaluated "
               "(no longer named by the state file)")
        return self._record(Record.skipped(step, prefix, why, run=self.status.run_id, mtime=mtime))

    def close(self) -> None:
        """No more records: the daemon closes the store and the summaries next.  Waits for one
        being written; an evaluation still running is abandoned (it runs again after a restart)
        — it used to finish into a closed summary writer and fail the stopping evaluator."""
        with self._recording:
            self.closed = True

    def _record(self, record: Record, evaluating: bool = True) -> Record:
        """Store, log, summarise and broadcast a record.  ``evaluating``: it ends this runner's
        evaluation (not a skip recorded from the watcher's thread meanwhile)."""
        with self._recording:
            if self.closed:
                log.info("step %d: not recorded, the evaluator is stopping (evaluated again after a restart)",
                         record.step)
                return record
            return self._store(record, evaluating)

    def _store(self, record: Record, evaluating: bool) -> Record:
        stored = self.store.add(record)
        if self.status.work_error:
            log.info("--work-dir %s takes records again", self.work.root)
            self.status.work_error = ""
        if stored is not None:
            log.info("step %d: %s %s", record.step, record.status,
                     " ".join(f"{k} {v:.4f}" for k, v in sorted(record.metrics.items())) or record.reason)
            if self.summaries is not None and record.status == "ok":
                self.summaries.write(record)
        if evaluating:
            self.status.evaluating_step = -1
        self.broadcast.notify(stored)
        return stored or record


def _mtime(path: str) -> float:
    try:
        return tf.io.gfile.stat(path).mtime_nsec / 1e9
    except tf.errors.OpError:
        return 0.0
