"""What the evaluator is doing, as the gRPC service and the logs read it: the ``Status`` snapshot
the controller replaces as it goes, and the ``Broadcast`` of each record it makes.  The service
reads these, never the loop itself (it can be served, and tested, without one)."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from showtell.evaluator.records.record import Record

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Progress:
    """How far the current evaluation is (replaced whole, never changed: the service's thread
    reads it while the loop's goes on).  The rate is taken from the batches after the first,
    which also pays for restoring the checkpoint (and, once per model, tracing)."""

    total: int  # images this evaluation covers
    done: int
    first_at: float  # when the first batch was done (monotonic)
    first_done: int
    at: float  # when ``done`` was counted

    @classmethod
    def first(cls, done: int, total: int, now: float) -> Progress:
        return cls(total=total, done=done, first_at=now, first_done=done, at=now)

    def advanced(self, done: int, now: float) -> Progress:
        return dataclasses.replace(self, done=done, at=now)

    def seconds_left(self) -> float | None:
        """None until a batch after the first has been timed."""
        if self.done <= self.first_done or self.at <= self.first_at:
            return None
        rate = (self.done - self.first_done) / (self.at - self.first_at)
        return max(0, self.total - self.done) / rate


@dataclass(frozen=True)
class WaitingForParts:
    """A checkpoint of a split evaluation some parts have published and others not yet."""

    run: str
    step: int
    checkpoint: str  # its file name
    missing: tuple[int, ...]  # the parts not in


@dataclass(frozen=True)
class Status:
    """What the evaluator is doing: a snapshot the controller replaces whole (its only writer),
    so the service's thread always reads one consistent state."""

    started: float = field(default_factory=time.monotonic)
    last_seen_step: int = -1
    newest_saved_at: float = 0.0  # when the checkpoint of ``last_seen_step`` was written (0: not known)
    evaluating_step: int = -1
    progress: Progress | None = None  # of the evaluation of ``evaluating_step``, once it has begun
    pending_steps: tuple[int, ...] = ()
    state_error: str = ""
    work_error: str = ""  # the work dir's trouble, until an evaluation is recorded again
    run_id: str = ""  # the model dir's current run
    trained_step: int = -1  # the step of the trainer's finished marker (-1: still training)
    parts: int = 1  # a split evaluation's parts (``--shard I/N``'s N), as part 0 sees them
    waiting_for_parts: tuple[WaitingForParts, ...] = ()

    @property
    def last_error(self) -> str:
        return self.state_error or self.work_error


class ProgressReport:
    """One evaluation's count after each batch: handed to ``publish`` (the controller puts it
    in the status for GetStatus) and logged every ``log_secs`` (the Watch streams hear nothing
    until the record lands)."""

    def __init__(self, step: int, *, publish: Callable[[Progress], None], log_secs: float,
                 clock: Callable[[], float]) -> None:
        self.step, self.publish, self.log_secs, self.clock = step, publish, log_secs, clock
        self.progress: Progress | None = None
        self._logged = clock()

    def __call__(self, done: int, total: int) -> None:
        now, current = self.clock(), self.progress
        self.progress = Progress.first(done, total, now) if current is None else current.advanced(done, now)
        self.publish(self.progress)
        if done < total and now - self._logged >= self.log_secs:
            self._logged = now
            left = self.progress.seconds_left()
            log.info("evaluating step %d: %d of %d images done%s", self.step, done, total,
                     "" if left is None else f", about {left:.0f} s left")


class Broadcast:
    """Tells listeners about each recorded evaluation (None: something changed but nothing new
    was stored).  ``version`` counts notifications, so a cheap reader (GetLatest's cache) can
    tell whether anything changed without a query.  Listeners run on the recording thread and
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
