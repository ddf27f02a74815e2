"""What the evaluator is doing, as the gRPC service and the logs read it: the ``Status`` the
evaluation loop keeps up to date, and the ``Broadcast`` of each record it makes.  The service
reads these, never the loop itself (it can be served, and tested, without one)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from showtell.evaluator.store import Record


@dataclass
class Status:
    started: float = field(default_factory=time.monotonic)
    last_seen_step: int = -1
    evaluating_step: int = -1
    pending_steps: list[int] = field(default_factory=list)
    state_error: str = ""
    work_error: str = ""  # the work dir's trouble, until an evaluation is recorded again
    run_id: str = ""  # the model dir's current run

    @property
    def last_error(self) -> str:
        return self.state_error or self.work_error


class Broadcast:
    """Tells listeners about each recorded evaluation (None: something changed but nothing new
    was stored).  ``version`` counts notifications, so a cheap reader (GetLatest's cache) can
    tell whether anything changed without a query.  Listeners run on the runner's thread and
    must only hand the record over (the gRPC server queues it onto its event loop)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: list[Callable[[Record | None], None]] = []
        self.version = 0

    def subscribe(self, listener: Callable[[Record | None], None]) -> None:
        with self._lock:
            self._listeners.append(listener)

    def notify(self, record: Record | None = None) -> None:
        with self._lock:
            self.version += 1
            listeners = list(self._listeners)
        for listener in listeners:
            listener(record)
