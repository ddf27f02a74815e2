"""The one place an evaluation's record is made durable and told about: stored, logged,
summarised for TensorBoard, exported (``--export-best``) and broadcast to Watch streams.

Two threads record — the loop (evaluations) and the watcher (checkpoints deleted while the loop
was busy) — so a record is written under a lock, and ``close`` waits for one being written: a
stopping evaluator closes the store and the summary writer next, and an evaluation finishing
after that is dropped (it runs again after a restart) instead of writing into closed resources.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tensorflow as tf

from showtell.evaluator.best_export import BestExport
from showtell.evaluator.schedule import Skip
from showtell.evaluator.status import Broadcast, Status
from showtell.evaluator.store import Record, Store
from showtell.evaluator.summaries import EvalSummaries

log = logging.getLogger(__name__)
# The work dir's own trouble (a full disk, an I/O error): the evaluation is not recorded, the
# service says so in its status and tries again after this long.
WORK_DIR_RETRY_SECS = 10.0


class Recorder:
    def __init__(self, *, store: Store, status: Status, broadcast: Broadcast, work_root: Path,
                 summaries: EvalSummaries | None = None, exporter: BestExport | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """
        Args:
          store: the durable history (the record's only required destination).
          status: updated with the work dir's trouble, and when an evaluation ends.
          broadcast: told about each record stored (Watch streams, GetLatest's cache).
          work_root: the evaluator's work dir, named in a full-disk message.
          summaries: TensorBoard writer for successful evaluations (optional).
          exporter: ``--export-best`` (optional).
          clock: monotonic seconds, for when to try again after trouble (tests pass a fake).
        """
        self.store, self.status, self.broadcast, self.work_root = store, status, broadcast, work_root
        self.summaries, self.exporter, self.clock = summaries, exporter, clock
        self._lock = threading.Lock()
        self.closed = False

    def record(self, record: Record, *, ends_evaluation: bool = True) -> Record:
        """Store, log, summarise and broadcast ``record``; the stored version (its rowid and
        count) or, once closed, ``record`` itself unstored.  ``ends_evaluation``: this is the
        loop's evaluation ending (not a skip recorded from the watcher's thread meanwhile)."""
        with self._lock:
            if self.closed:
                log.info("step %d: not recorded, the evaluator is stopping (evaluated again after a restart)",
                         record.step)
                return record
            stored = self.store.add(record)
            if self.status.work_error:
                log.info("--work-dir %s takes records again", self.work_root)
                self.status.work_error = ""
            if stored is not None:
                log.info("step %d: %s %s", record.step, record.status,
                         " ".join(f"{k} {v:.4f}" for k, v in sorted(record.metrics.items())) or record.reason)
                if self.summaries is not None and record.status == "ok":
                    self.summaries.write(record)
            if ends_evaluation:
                self.status.end()
            self.broadcast.notify(stored)
            return stored or record

    def skip(self, skip: Skip, *, run: str, mtime: float = 0.0, ends_evaluation: bool = True) -> Record:
        """Record ``skip``'s checkpoint skipped, for its reason (``schedule`` decided it)."""
        checkpoint = skip.checkpoint
        record = Record.skipped(checkpoint.step, checkpoint.prefix, skip.reason, run=run, mtime=mtime)
        return self.record(record, ends_evaluation=ends_evaluation)

    def export(self, record: Record, model: Any, vocab: Any) -> None:
        """``--export-best``: consider the model just evaluated (still in memory); a failed
        export is logged and the previous one stays."""
        if self.exporter is None or record.status != "ok" or self.closed:
            return
        try:
            self.exporter.consider(record, model, vocab)
        except (OSError, ValueError, tf.errors.OpError) as exc:
            log.error("--export-best: exporting step %d failed (%s); the previous export stays",
                      record.step, exc)

    def trouble(self, step: int, exc: Exception) -> float:
        """The work dir failed a record (a full disk, an I/O error) — not the checkpoint's fault:
        nothing is recorded (SQLite rolled the row back), the status says what, one line is
        logged (once per distinct message).  Returns when to try the same checkpoint again."""
        self.status.end()
        try:
            free = f"{shutil.disk_usage(self.work_root).free / 2**20:.0f} MB free"
        except OSError:
            free = "free space unknown"
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        message = (f"step {step} not evaluated: --work-dir {self.work_root} ({free}): {first}; "
                   f"retrying every {WORK_DIR_RETRY_SECS:g} s")
        if message != self.status.work_error:
            log.error("%s", message)
        self.status.work_error = message
        return self.clock() + WORK_DIR_RETRY_SECS

    def close(self) -> None:
        """No more records from here on; waits for one being written."""
        with self._lock:
            self.closed = True
