"""Following an evaluator's ``Watch`` stream across its restarts — the one client loop that
``showtell metrics watch``, ``showtell demo`` and the trainer's ``--stop-when`` share.

The stream is resumed after the last global step it delivered, so a restart of the evaluator
costs neither a duplicate nor a gap (evaluations arrive in step order under both policies).
Keepalive pings notice an evaluator that vanished without closing the connection.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

import grpc

from showtell.transport import ClientSecurity
from showtell.v1 import metrics_pb2 as pb
from showtell.v1 import metrics_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)
# Ping a quiet stream every 30 s (the server permits ≥ 20 s) and give up on it after 10 s more.
WATCH_OPTIONS = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.keepalive_permit_without_calls", 1),
]
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED,
                       grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED,
                       grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN})


class WatchFollower:
    """Iterate over evaluations from ``target``, reconnecting with exponential backoff.

    Args (keyword-only):
      target: the evaluator's HOST:PORT.
      security: TLS / token settings (default: plaintext, no token).
      after_step: replay evaluations after this step first (-1: all).
      persistent: retry every failure, the first connection included (a background listener
        such as early stop); otherwise the first failure to connect, and any error that a
        retry cannot fix (bad token, bad request), is raised to the caller (a CLI).
      on_retry: called with (error, seconds until the next attempt) before each wait.
      max_backoff: the longest wait between attempts, in seconds.
    """

    def __init__(self, *, target: str, security: ClientSecurity | None = None, after_step: int = -1,
                 persistent: bool = False, on_retry: Callable[[grpc.RpcError, float], None] | None = None,
                 max_backoff: float = 10.0) -> None:
        self.target = target
        self.security = security or ClientSecurity()
        self.last_step = after_step
        self.persistent = persistent
        self.on_retry = on_retry or (lambda error, wait: None)
        self.max_backoff = max_backoff
        self.reconnects = 0
        self._closed = threading.Event()
        self._call: grpc.Call | None = None

    def close(self) -> None:
        """End the iteration (from any thread)."""
        self._closed.set()
        call = self._call
        if call is not None:
            call.cancel()

    def __iter__(self) -> Iterator[pb.Evaluation]:
        backoff = 1.0
        connected = False
        while not self._closed.is_set():
            with self.security.channel(self.target, WATCH_OPTIONS) as channel:
                call = pb_grpc.MetricsStub(channel).Watch(pb.WatchRequest(after_step=self.last_step))
                self._call = call
                try:
                    call.initial_metadata()  # the server answers with headers at once: connected
                    if self._closed.is_set():
                        return
                    if connected:
                        self.reconnects += 1
                        log.info("watch: reconnected to %s, resuming after step %d", self.target,
                                 self.last_step)
                    connected, backoff = True, 1.0
                    for evaluation in call:
                        if evaluation.global_step <= self.last_step:
                            continue  # never twice
                        self.last_step = evaluation.global_step
                        yield evaluation
                    error = None  # the server ended the stream: follow its next instance
                except grpc.RpcError as exc:
                    if self._closed.is_set():
                        return
                    retry = self.persistent or (connected and exc.code() in RETRYABLE)
                    if not retry:
                        raise
                    error = exc
                finally:
                    self._call = None
            if error is not None:
                self.on_retry(error, backoff)
            if self._closed.wait(backoff):
                return
            backoff = min(backoff * 2, self.max_backoff)
