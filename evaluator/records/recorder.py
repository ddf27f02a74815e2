"""The one place an evaluation's record is made durable; the controller's actions (log,
summaries, broadcast, best export) are told about it under the same lock.

Two threads record — the controller's loop (evaluations) and the watcher's (checkpoints deleted
while the loop was busy) — so a record is written under a lock, and ``close`` waits for one being
written and its actions: a stopping evaluator closes the store and the summary writer next, and
an evaluation finishing after that is dropped (it runs again after a restart) instead of writing
into closed resources.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from showtell.evaluator.records.record import Record
from showtell.evaluator.records.store import Store

log = logging.getLogger(__name__)
# The work dir's own trouble (a full disk, an I/O error): the evaluation is not recorded, the
# service says so in its status and tries again after this long.
WORK_DIR_RETRY_SECS = 10.0

Action = Callable[[Record], None]  # told about each record stored (``evaluator/records/actions.py``)


class Recorder:
    def __init__(self, *, store: Store, work_root: Path, publish: Action | None = None) -> None:
        """
        Args:
          store: the durable history.
          work_root: the evaluator's work dir, named in a full-disk message.
          publish: a part of a split evaluation: its part file, written before the history's row
            (``records/parts_dir.py``) — a crash between them evaluates it again, never loses it.
        """
        self.store, self.work_root, self.publish = store, work_root, publish
        self._lock = threading.Lock()
        self.closed = False

    def record(self, record: Record, actions: Sequence[Action] = ()) -> Record | None:
        """Store ``record`` (and its other sets' records, ``also``) and tell ``actions`` about each
        stored version (with its rowid).  None
        when nothing new was stored: closed (the evaluator is stopping) or already recorded (the
        store logs that error).  The work dir's trouble raises (``OSError``, ``sqlite3.Error``)."""
        with self._lock:
            if self.closed:
                log.info("step %d: not recorded, the evaluator is stopping (evaluated again after a restart)",
                         record.step)
                return None
            if self.publish is not None and not self.store.has(record.run, record.step, record.checkpoint):
                self.publish(record)
            stored = self.store.add(record)
            if stored is not None:
                for one in (stored, *stored.also):  # the default set's record, then the other sets'
                    for action in actions:
                        action(one)
            return stored

    def trouble(self, step: int, exc: Exception) -> str:
        """The work dir failed a record (a full disk, an I/O error) — not the checkpoint's fault:
        nothing was recorded (SQLite rolled the row back).  The one line that says so."""
        try:
            free = f"{shutil.disk_usage(self.work_root).free / 2**20:.0f} MB free"
        except OSError:
            free = "free space unknown"
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return (f"step {step} not evaluated: --work-dir {self.work_root} ({free}): {first}; "
                f"retrying every {WORK_DIR_RETRY_SECS:g} s")

    def close(self) -> None:
        """No more records from here on; waits for one being written."""
        with self._lock:
            self.closed = True
