"""Fan-out of new evaluations to every open ``Watch`` stream, on the gRPC server's event loop.

Streams cost memory, not threads: each waits on one shared future that the next recording
resolves (no timer, no thread, no per-stream query).  A recording is converted to its proto
once and kept in a short in-memory tail; a stream reads what arrived after its cursor from
the tail — or from the store if it fell further behind than the tail reaches.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from showtell.evaluator.records.record import Record
from showtell.v1 import metrics_pb2 as pb

TAIL = 1024


class History(Protocol):
    """What the feed reads of the history (``Store``): the records that arrived after a row."""

    def arrived_after(self, rowid: int) -> list[Record]: ...


@dataclass(frozen=True)
class Arrival:
    rowid: int  # the store's arrival order
    step: int
    message: pb.WatchResponse  # made once, written to every stream


class StreamFeed:
    """Thread-safe ``publish`` (from the runner's thread); ``wait``/``since`` on the loop."""

    def __init__(self, store: History, loop: asyncio.AbstractEventLoop,
                 to_message: Callable[[Record], pb.WatchResponse]) -> None:
        self.store, self._loop, self._to_proto = store, loop, to_message
        self._tail: deque[Arrival] = deque(maxlen=TAIL)
        self._changed: asyncio.Future = loop.create_future()
        self.closed = False

    def publish(self, record: Record | None) -> None:
        """Called on any thread after the runner recorded something (None: nothing new)."""
        with contextlib.suppress(RuntimeError):  # the loop closed: the server is gone, nobody listens
            self._loop.call_soon_threadsafe(self._publish, record)

    def _publish(self, record: Record | None) -> None:
        if record is not None:
            self._tail.append(Arrival(record.rowid, record.step, self._to_proto(record)))
        self._wake()

    def close(self) -> None:
        """Wake every stream for the last time (the server is stopping)."""
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, self._loop.create_future()
        changed.set_result(None)

    async def wait(self) -> None:
        # shield: a cancelled stream must not cancel the future the others wait on
        await asyncio.shield(self._changed)

    def since(self, cursor: int) -> list[Arrival]:
        """Arrivals with a rowid above ``cursor``, in arrival order."""
        if self._tail and self._tail[0].rowid <= cursor + 1:
            return [a for a in self._tail if a.rowid > cursor]
        if not self._tail:
            return []  # nothing published since start: nothing newer than any cursor
        return [Arrival(r.rowid, r.step, self._to_proto(r)) for r in self.store.arrived_after(cursor)]
