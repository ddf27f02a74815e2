"""One checkpoint at a time: pin it, evaluate it, record the outcome, unpin it.

Every outcome is recorded — ok, failed (a corrupt file, another model, bad data) or skipped —
except two, which come back to the loop as a ``Retry`` saying when to look again: files not all
there yet (a synced copy delivers the state file first; the attempts are counted here, the
decision is ``schedule.not_arrived``'s), and the work dir's own trouble (a full disk, which the
recorder reports).  So nothing is retried forever and nothing already written is lost.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import tensorflow as tf

from showtell.captioning.model.modeldir import read_state, saved_at
from showtell.common.errors import ModelDirIncomplete, ShowtellError
from showtell.evaluator import schedule
from showtell.evaluator.evaluation import EvalResult
from showtell.evaluator.pinning import Missing, files_state, pin, unpin
from showtell.evaluator.recorder import Recorder
from showtell.evaluator.schedule import Checkpoint, Retry
from showtell.evaluator.seen import recorded
from showtell.evaluator.sizing import RunSizes
from showtell.evaluator.status import ProgressReport
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


class Attempts:
    def __init__(self, *, model_dir: str, evaluator: Evaluator, recorder: Recorder, pins: Path,
                 arrival_timeout: float = 300.0, progress_log_secs: float = 30.0,
                 sizes: RunSizes | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        """
        Args:
          model_dir: the trainer's model directory (local path or ``tf.io.gfile`` URL).
          evaluator: restores and validates one checkpoint.
          recorder: makes every record durable and tells everyone about it.
          pins: where checkpoints are pinned while evaluated (``WorkDir.pins``).
          arrival_timeout: seconds a checkpoint named by the state file may stay incomplete (a
            synced copy still arriving) before it is recorded skipped.
          progress_log_secs: how often a long evaluation logs how far it is.
          sizes: ``--max-eval-examples auto``: each run's size, chosen at its first evaluation.
          clock: monotonic seconds (tests pass a fake).
        """
        self.model_dir, self.evaluator, self.recorder, self.pins = model_dir, evaluator, recorder, pins
        self.arrival_timeout, self.sizes, self.clock = arrival_timeout, sizes, clock
        self.status = recorder.status
        self.progress = ProgressReport(self.status, log_secs=progress_log_secs, clock=clock)
        self._arrivals: dict[str, tuple[float, int]] = {}  # prefix → (first seen incomplete, attempts)

    def forget(self) -> None:
        """A new run began: its checkpoints arrive afresh."""
        self._arrivals.clear()

    def settle_leftovers(self, *, named: set[str], run: str, store: Store) -> None:
        """Pins a stopped evaluator left behind: recorded skipped if deleted since, then removed."""
        try:
            leftovers = list(self.pins.iterdir())
        except OSError:
            return
        names = [p.name for p in leftovers]
        prefixes = [os.path.join(self.model_dir, n) for n in names]
        for skip in schedule.leftover_pins(names, model_dir=self.model_dir, named=named,
                                           recorded=recorded(store, run, prefixes)):
            self.recorder.skip(skip, run=run)
        for leftover in leftovers:
            shutil.rmtree(leftover, ignore_errors=True)

    def evaluate(self, checkpoint: Checkpoint, run: str) -> Record | Retry:
        """The checkpoint's record (as stored), or when to try it again."""
        try:
            return self._evaluate(checkpoint, run)
        except (OSError, sqlite3.Error, tf.errors.ResourceExhaustedError) as exc:
            return Retry(at=self.recorder.trouble(checkpoint.step, exc), attempts=0)

    def _evaluate(self, checkpoint: Checkpoint, run: str) -> Record | Retry:
        step, prefix = checkpoint.step, checkpoint.prefix
        self.status.begin(step)
        started, mtime, before = time.time(), saved_at(prefix), files_state(prefix)
        try:
            pinned = pin(prefix, self.pins)
        except Missing as exc:
            return self._not_arrived(checkpoint, str(exc), mtime, run)
        try:
            log.info("evaluating %s (step %d)", prefix, step)
            self.progress.start()
            images = self.sizes.for_run(run, self.model_dir) if self.sizes is not None else None
            result = self.evaluator.evaluate(pinned, step=step, progress=self.progress, images=images)
            record = Record(step, prefix, mtime, time.time(), result.seconds, result.examples,
                            metrics=result.metrics, samples=result.samples, run=run, scoring=result.scoring)
        except ModelDirIncomplete as exc:  # e.g. showtell-model.json not synced yet
            return self._not_arrived(checkpoint, str(exc), mtime, run)
        except ShowtellError as exc:
            if files_state(prefix) != before:  # still being written (a sync, a slow copy): not a failure
                changed = f"{prefix}: its files changed while being read"
                return self._not_arrived(checkpoint, changed, mtime, run)
            log.error("%s", exc)
            record = Record.failed(step, prefix, str(exc).replace(pinned, prefix), run=run, mtime=mtime,
                                   seconds=time.time() - started)
        finally:
            unpin(pinned)
        self._arrivals.pop(prefix, None)
        recorded = self.recorder.record(record)
        self.recorder.export(record, self.evaluator.model, self.evaluator.vocab)
        return recorded

    def _not_arrived(self, checkpoint: Checkpoint, reason: str, mtime: float, run: str) -> Record | Retry:
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
            (log.info if attempts == 0 else log.debug)(
                "%s; named by the state file, so not arrived yet: retrying in %.1f s "
                "(for up to --arrival-timeout %g s)", reason, decision.at - now, self.arrival_timeout)
            return decision
        self._arrivals.pop(checkpoint.prefix, None)
        return self.recorder.skip(decision, run=run, mtime=mtime)
