"""The evaluator's metrics from Python: ``MetricsClient`` (one method per query, docs/grpc.md)
and ``WatchFollower``, following the ``Watch`` stream across the evaluator's restarts — the one
client loop that ``showtell metrics watch``, ``showtell demo`` and the trainer's ``--stop-when``
share.  Needs grpcio and protobuf only (``pip install 'showtell[client]'``).

The stream is resumed after the last (run, global step) it delivered, so a restart of the
evaluator costs neither a duplicate nor a gap (a run's evaluations arrive in step order under
both policies; a new run in the model dir starts its steps afresh, and the evaluator replays
it in full to a client that last saw an earlier run).
Keepalive pings notice an evaluator that vanished without closing the connection.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator

import grpc

from showtell.api.transport import ClientSecurity
from showtell.v1 import metrics_pb2 as pb
from showtell.v1 import metrics_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)
KEEPALIVE_SECS = 30.0  # ping a quiet stream this often (the evaluator permits ≥ 10 s) …
KEEPALIVE_TIMEOUT_SECS = 10.0  # … and give it up when a ping is not answered this soon


def watch_options(keepalive_secs: float = KEEPALIVE_SECS) -> list[tuple[str, int]]:
    """Channel options that notice an evaluator gone without closing the connection."""
    return [("grpc.keepalive_time_ms", int(keepalive_secs * 1000)),
            ("grpc.keepalive_timeout_ms", int(KEEPALIVE_TIMEOUT_SECS * 1000)),
            ("grpc.http2.max_pings_without_data", 0),  # a quiet Watch sends no data: keep pinging
            ("grpc.keepalive_permit_without_calls", 1)]

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
      keepalive_secs: how often to ping a quiet stream.
      eval_set: the evaluation set followed (empty: "val"; one set: steps are counted per set).
    """

    def __init__(self, *, target: str, security: ClientSecurity | None = None, after_step: int = -1,
                 persistent: bool = False, on_retry: Callable[[grpc.RpcError, float], None] | None = None,
                 max_backoff: float = 10.0, keepalive_secs: float = KEEPALIVE_SECS,
                 eval_set: str = "") -> None:
        self.target, self.eval_set = target, eval_set
        self.security = security or ClientSecurity()
        self.last_step = after_step
        self.last_run: str | None = None  # None: whatever the evaluator's current run is
        self.persistent = persistent
        self.on_retry = on_retry or (lambda error, wait: None)
        self.max_backoff = max_backoff
        self.options = watch_options(keepalive_secs)
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
            with self.security.channel(self.target, self.options) as channel:
                call = pb_grpc.MetricsServiceStub(channel).Watch(
                    pb.WatchRequest(after_step=self.last_step, run_id=self.last_run or "",
                                    eval_set=self.eval_set))
                self._call = call
                try:
                    call.initial_metadata()  # the server answers with headers at once: connected …
                    if call.done() and call.code() is not grpc.StatusCode.OK:
                        raise call  # … unless the call ended instead (its rendezvous is the RpcError)
                    if self._closed.is_set():
                        return
                    if connected:
                        self.reconnects += 1
                        log.info("watch: reconnected to %s, resuming after step %d", self.target,
                                 self.last_step)
                    connected, backoff = True, 1.0
                    for message in call:
                        evaluation = message.evaluation
                        if evaluation.run_id != self.last_run and self.last_run is not None:
                            self.last_step = -1  # a new run: its steps start again
                        elif evaluation.global_step <= self.last_step:
                            continue  # never twice
                        self.last_run, self.last_step = evaluation.run_id, evaluation.global_step
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


MODES = {"max": pb.GetBestRequest.MODE_MAX, "min": pb.GetBestRequest.MODE_MIN,
         None: pb.GetBestRequest.MODE_UNSPECIFIED}


class MetricsClient:
    """An evaluator's ``showtell.v1.MetricsService``, one method per query::

        with MetricsClient("127.0.0.1:50051") as client:
            print(client.latest().metrics["cider"])
            for evaluation in client.evaluations(from_step=1000):
                ...

    ``run_id``: empty for the model dir's current run, ``ALL_RUNS`` ("*") for every run.
    A failed call raises ``grpc.RpcError`` (``.code()``: NOT_FOUND before the first evaluation,
    UNAVAILABLE when nothing answers, INVALID_ARGUMENT with what is allowed).
    """

    def __init__(self, target: str = "127.0.0.1:50051", *, security: ClientSecurity | None = None,
                 timeout: float = 10.0) -> None:
        self.target, self.security, self.timeout = target, security or ClientSecurity(), timeout
        self.channel = self.security.channel(target)
        self.stub = pb_grpc.MetricsServiceStub(self.channel)

    def __enter__(self) -> MetricsClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def latest(self, run_id: str = "", eval_set: str = "") -> pb.Evaluation:
        """The newest evaluation, by global step (of ``eval_set``: empty for "val")."""
        request = pb.GetLatestRequest(run_id=run_id, eval_set=eval_set)
        return self.stub.GetLatest(request, timeout=self.timeout).evaluation

    def best(self, metric: str, *, mode: str | None = None, run_id: str = "",
             eval_set: str = "") -> pb.Evaluation:
        """The best successful evaluation by ``metric`` (``mode`` max or min; default: the
        metric's own direction); its ``export_path`` names the --export-best export if it is one."""
        request = pb.GetBestRequest(metric=metric, mode=MODES[mode], run_id=run_id, eval_set=eval_set)
        return self.stub.GetBest(request, timeout=self.timeout).evaluation

    def evaluations(self, *, from_step: int = 0, page_size: int = 100,
                    run_id: str = "", eval_set: str = "") -> Iterator[pb.Evaluation]:
        """Every evaluation from ``from_step`` in step order, fetched a page at a time (of
        ``eval_set``: empty for "val", "*" for every set)."""
        token = ""
        while True:
            request = pb.ListEvaluationsRequest(from_step=from_step, page_size=page_size, page_token=token,
                                                run_id=run_id, eval_set=eval_set)
            page = self.stub.ListEvaluations(request, timeout=self.timeout)
            yield from page.evaluations
            token = page.next_page_token
            if not token:
                return

    def status(self) -> pb.EvaluatorStatus:
        """What the evaluator is doing: the checkpoint it evaluates, what is pending, its errors."""
        return self.stub.GetStatus(pb.GetStatusRequest(), timeout=self.timeout).status

    def runs(self, metric: str = "", target: float | None = None,
             page_size: int = 100) -> list[pb.RunSummary]:
        """The runs in the evaluator's history (newest first; then those its model dir records
        with no evaluation yet), with the best ``metric`` (default exact_match) and the training
        time until it first reached ``target``; every page."""
        found, token = [], ""
        while True:
            request = pb.ListRunsRequest(metric=metric, page_size=page_size, page_token=token)
            if target is not None:
                request.target = target
            page = self.stub.ListRuns(request, timeout=self.timeout)
            found += page.runs
            token = page.next_page_token
            if not token:
                return found

    def run_record(self, run_id: str = "") -> tuple[str, dict]:
        """(run id, record) of a run as its trainer recorded it (empty: the current run)."""
        answer = self.stub.GetRun(pb.GetRunRequest(run_id=run_id), timeout=self.timeout)
        return answer.run_id, json.loads(answer.record_json)

    def compare(self, a: pb.EvaluationRef, b: pb.EvaluationRef, *, samples: int = 0,
                confidence: float = 0.0) -> pb.CompareResponse:
        """B − A of every metric on the same images, with paired-bootstrap intervals and p-values
        (``samples`` and ``confidence`` 0: the evaluator's own)."""
        request = pb.CompareRequest(a=a, b=b, samples=samples, confidence=confidence)
        return self.stub.Compare(request, timeout=self.timeout)

    def watch(self, *, after_step: int = -1, **options) -> WatchFollower:
        """Evaluations as they are recorded (after a replay of those after ``after_step``),
        across the evaluator's restarts: iterate it; ``close()`` it from another thread."""
        return WatchFollower(target=self.target, security=self.security, after_step=after_step, **options)


def evaluation_ref(text: str, metric: str, eval_set: str = "") -> pb.EvaluationRef:
    """``STEP``, ``RUN:STEP``, ``best`` or ``RUN:best`` (the run's best by ``metric``) as an
    ``EvaluationRef``; no run: the model dir's current one.  ``ValueError`` says what is wrong."""
    run, _, at = text.rpartition(":")
    if at == "best":
        return pb.EvaluationRef(run_id=run, best=metric, eval_set=eval_set)
    try:
        step = int(at)
    except ValueError:
        raise ValueError(f"{text!r} is not STEP, RUN:STEP, best or RUN:best") from None
    if step < 0:
        raise ValueError(f"{text!r}: a step is ≥ 0")
    return pb.EvaluationRef(run_id=run, step=step, eval_set=eval_set)
