"""The evaluation loop: read what the model dir names, ask the schedule what to do, do it.

In the shape of the trainer's ``Controller``: the watcher only wakes the loop; each look asks
``ModelDirReader`` what is due (the state file, the run and the history, through ``schedule``),
and ``Attempts`` evaluates each (pin, evaluate, record, unpin) or says when to look again.  Policy
``all`` also keeps ``SeenCheckpoints``, so one deleted while the loop was busy is recorded skipped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import tensorflow as tf

from showtell.captioning.model.modeldir import read_run_id, read_state
from showtell.common.errors import ShowtellError
from showtell.evaluator import schedule
from showtell.evaluator.attempts import Attempts, Evaluator
from showtell.evaluator.config import Finish
from showtell.evaluator.reading import ModelDirReader
from showtell.evaluator.recorder import Recorder
from showtell.evaluator.schedule import Retry
from showtell.evaluator.seen import SeenCheckpoints
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
        self.reader = ModelDirReader(model_dir=model_dir, store=store, status=self.status, seen=self.seen,
                                     attempts=self.attempts, policy=policy)
        self.wake, self.stopping = threading.Event(), threading.Event()
        self.evaluations = 0  # by this process (ok or failed; a skipped checkpoint is not one)
        self.done: str | None = None  # why the loop ended by itself
        self.retry_at: float | None = None  # when to look again without being woken

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
        named = self.reader.named()
        if named is not None:
            self.attempts.settle_leftovers(named=set(named), run=self.reader.run(), store=self.store)
        self.wake.set()
        while not self.stopping.is_set():
            timeout = poll_fallback_secs
            if self.retry_at is not None:
                timeout = max(0.0, min(timeout, self.retry_at - self.clock()))
            self.wake.wait(timeout=timeout)
            self.wake.clear()
            self.look()
            self.done = self.done or (self.reader.trained() if self.finish.when_trained else None)
            if self.done:
                log.info("done: %s", self.done)
                return self.done
        return None

    def look(self) -> None:
        """One pass: evaluate what the schedule says is due, in order, until something has to
        wait (files still arriving, the work dir's trouble), a finish condition holds, or — policy
        latest — one evaluation is done (the newest may have moved on meanwhile)."""
        self.retry_at = None
        for checkpoint in self.reader.pending():
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
