"""The evaluation loop: read what the model dir names, ask the schedule what to do, do it.

In the shape of the trainer's ``Controller``: the watcher only wakes the loop; each look reads
the state file, the run and the history, ``schedule`` decides which checkpoints are due, and
``Attempts`` evaluates each (pin, evaluate, record, unpin) or says when to look again.  Policy
``all`` also keeps ``SeenCheckpoints``, so one deleted while the loop was busy is recorded skipped.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import tensorflow as tf

from showtell.captioning.model.modeldir import checkpoint_step, read_finished, read_run_id, read_state
from showtell.common.errors import ShowtellError
from showtell.evaluator import schedule
from showtell.evaluator.attempts import Attempts, Evaluator
from showtell.evaluator.config import Finish
from showtell.evaluator.recorder import Recorder
from showtell.evaluator.schedule import Checkpoint, Retry
from showtell.evaluator.seen import SeenCheckpoints, recorded
from showtell.evaluator.sizing import RunSizes
from showtell.evaluator.store import Store

log = logging.getLogger(__name__)


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
        self.model_dir, self.evaluator, self.store, self.pins = model_dir, evaluator, store, pins
        self.recorder = recorder
        self.policy, self.finish, self.clock = policy, finish or Finish(), clock
        self.status = recorder.status
        self.attempts = Attempts(model_dir=model_dir, evaluator=evaluator, recorder=recorder, pins=pins,
                                 arrival_timeout=arrival_timeout, progress_log_secs=progress_log_secs,
                                 sizes=sizes, clock=clock)
        self.seen = SeenCheckpoints(store=store, recorder=recorder)
        self.wake, self.stopping = threading.Event(), threading.Event()
        self.evaluations = 0  # by this process (ok or failed; a skipped checkpoint is not one)
        self.done: str | None = None  # why the loop ended by itself
        self.retry_at: float | None = None  # when to look again without being woken
        self._run_known = False

    # -- the watcher's thread -------------------------------------------------------------------

    def on_change(self) -> None:
        """The watcher saw the model dir change: note what is named (policy all), wake the loop."""
        if self.policy == "all":
            try:
                named, run = read_state(self.model_dir), read_run_id(self.model_dir)
            except (ShowtellError, OSError, tf.errors.OpError):
                named, run = [], None  # being replaced: the loop reads it again anyway
            if run is not None:
                self.seen.note(named, run)
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
            with self.seen.claim(checkpoint, self.status.run_id) as claimed:
                if not claimed:
                    continue  # the watcher's thread recorded it meanwhile
                record = self.attempts.evaluate(checkpoint, self.status.run_id)
            if isinstance(record, Retry):
                self.retry_at = record.at  # files still arriving, or the work dir's trouble
                return
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
        self.seen.record_vanished(set(named))
        if named:
            self.status.last_seen_step = max(checkpoint_step(p) for p in named)
        newest = self.store.latest(run)
        todo = schedule.to_evaluate(named, recorded=recorded(self.store, run, named), policy=self.policy,
                                    newest_recorded=newest.step if newest else None)
        self.status.pending_steps = [c.step for c in todo]
        return todo

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
        self.attempts.forget()
        return run

    def _settle_leftover_pins(self) -> None:
        """Pins a stopped evaluator left behind: recorded skipped if deleted since, then removed."""
        try:
            leftovers, named = list(self.pins.iterdir()), set(read_state(self.model_dir))
        except (OSError, ShowtellError):
            return
        run = self._current_run()
        names = [p.name for p in leftovers]
        prefixes = [os.path.join(self.model_dir, n) for n in names]
        for skip in schedule.leftover_pins(names, model_dir=self.model_dir, named=named,
                                           recorded=recorded(self.store, run, prefixes)):
            self.recorder.skip(skip, run=run)
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
