"""The ``showtell.v1.MetricsService`` gRPC service over the store and the evaluator's status.

Every request is validated: bad arguments get ``INVALID_ARGUMENT`` with a sentence saying
which field and what is allowed, missing data ``NOT_FOUND`` — never an exception escaping
into gRPC's generic ``UNKNOWN``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable

import grpc

from showtell import metrics as registry
from showtell.api.contract import ALL_RUNS, ALL_SETS, DEFAULT_SET, STOPPING
from showtell.common import run_records
from showtell.common.files import is_url
from showtell.common.locks import held
from showtell.common.model_dir import ModelDir
from showtell.evaluator.loop.status import Broadcast, Progress, Status
from showtell.evaluator.records.record import Record
from showtell.evaluator.records.store import Store
from showtell.evaluator.scoring import bootstrap
from showtell.evaluator.scoring.bootstrap import Bootstrap, ImageStats
from showtell.evaluator.serving.feed import StreamFeed
from showtell.evaluator.serving.messages import (
    DEFAULT_PAGE,
    MAX_PAGE,
    RUN_ID,
    ExportView,
    TrackingView,
    best_export_proto,
    bootstrap_proto,
    costs_proto,
    decode_runs_token,
    decode_token,
    duration,
    encode_runs_token,
    encode_token,
    set_started,
    to_proto,
    tracking_proto,
    watch_message,
)
from showtell.v1 import metrics_pb2 as pb
from showtell.v1 import metrics_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)
# Why a metric both evaluations have is not compared, when it has no per-image statistics.
DESCRIBES = ("no per-image statistics (it describes the captions as a whole): no interval, no paired "
             "comparison")
class MetricsService(pb_grpc.MetricsServiceServicer):
    """The metrics service, served from ``grpc.aio``: every method is a coroutine on the
    server's event loop (store queries are short local SQLite reads), and a ``Watch`` stream
    is a coroutine waiting on the ``StreamFeed`` — thousands cost memory, not threads.

    It reads what the evaluation loop publishes, never the loop: the history, the ``Status``
    the loop keeps current and the ``Broadcast`` of its records.

    Args (keyword-only):
      store: the evaluation history.
      status: what the evaluator is doing now (the controller's latest snapshot; read only here).
      broadcast: each record as it is made (feeds ``Watch``, invalidates GetLatest's cache).
      policy: ``latest`` or ``all``, as reported by GetStatus.
      model_dir: the model dir: its runs' records (ListRuns, GetRun), its path for GetStatus.
      observer: how the model dir is watched (inotify, polling, gfile-polling).
      exporter: ``--export-best``, if any (GetBest names the export of the best evaluation).
      max_streams: concurrent ``Watch`` streams served; beyond it RESOURCE_EXHAUSTED.
      bootstrap: ``Compare``'s resamples and confidence when a request leaves them 0.
      eval_sets: the evaluation sets each checkpoint is evaluated on (``DEFAULT_SET`` first).
    """

    def __init__(self, *, store: Store, status: Callable[[], Status], broadcast: Broadcast, policy: str,
                 model_dir: ModelDir, observer: str, exporter: ExportView | None = None,
                 max_streams: int = 10_000, bootstrap: Bootstrap | None = None,
                 eval_sets: tuple[str, ...] = (DEFAULT_SET,), tracking: TrackingView | None = None) -> None:
        self.store, self.status, self.broadcast, self.policy = store, status, broadcast, policy
        self.bootstrap, self.eval_sets = bootstrap or Bootstrap(), eval_sets
        self.exporter, self.tracking = exporter, tracking
        self.model_dir, self.checkpoint_dir, self.observer = model_dir, model_dir.root, observer
        self.max_streams = max_streams
        self.streams = 0
        self.feed: StreamFeed | None = None
        self._latest: tuple[tuple, pb.GetLatestResponse | None] = ((), None)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start feeding ``Watch`` streams from the broadcast records (on ``loop``)."""
        self.feed = StreamFeed(self.store, loop, watch_message)  # each record's message made once
        self.broadcast.subscribe(self.feed.publish)

    def close(self) -> None:
        """Open streams end with UNAVAILABLE (clients reconnect to the next instance)."""
        if self.feed is not None:
            self.feed.close()

    def _run(self, requested: str) -> str:
        """A request's ``run_id``: empty means the model dir's current run."""
        return requested or self.status().run_id

    def _set(self, requested: str, every: bool = False) -> str | None:
        """A request's ``eval_set``: empty means ``DEFAULT_SET``; ``*`` every set where ``every``
        allows it; None for a set this evaluator does not evaluate (INVALID_ARGUMENT)."""
        name = requested or DEFAULT_SET
        if name in self.eval_sets or (every and name == ALL_SETS):
            return name
        return None

    def _unknown_set(self, requested: str) -> str:
        return f"eval_set {requested[:40]!r} is not one of this evaluator's: {', '.join(self.eval_sets)}"

    async def GetLatest(self, request, context):
        # The hot query (dashboards poll it): answer from a copy rebuilt only when the evaluator
        # records something (or the run changes).  The version is read *before* the store, so a
        # racing write can only make the cached copy newer than its version, never stale.
        run, eval_set = self._run(request.run_id), self._set(request.eval_set)
        if eval_set is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, self._unknown_set(request.eval_set))
        key = (self.broadcast.version, run, eval_set)
        cached_key, cached = self._latest
        if cached_key != key or cached is None:
            record = self.store.latest(run, eval_set=eval_set)
            cached = pb.GetLatestResponse(evaluation=to_proto(record)) if record is not None else None
            self._latest = (key, cached)
        if cached is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no evaluation recorded yet"
                                + (f" for run {run}" if run not in ("", ALL_RUNS) else ""))
        return cached

    async def ListEvaluations(self, request, context):
        limit = request.page_size or DEFAULT_PAGE
        if not 1 <= limit <= MAX_PAGE:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"page_size must be 1..{MAX_PAGE} (got {request.page_size})")
        if request.from_step < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"from_step must be ≥ 0 (got {request.from_step})")
        from_step, offset = request.from_step, 0
        if request.page_token:
            try:
                token_step, offset = decode_token(request.page_token)
            except ValueError as exc:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            if token_step != from_step:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    "page_token belongs to a listing with another from_step")
        eval_set = self._set(request.eval_set, every=True)
        if eval_set is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, self._unknown_set(request.eval_set))
        records = self.store.page(from_step, offset, limit + 1, run=self._run(request.run_id),
                                  eval_set=eval_set)
        more = len(records) > limit
        return pb.ListEvaluationsResponse(
            evaluations=[to_proto(r) for r in records[:limit]],
            next_page_token=encode_token(from_step, offset + limit) if more else "",
        )

    async def GetBest(self, request, context):
        metric = request.metric
        if not metric:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "metric is required, e.g. 'cider' or 'loss'")
        known = set(registry.names()) | self.store.metric_names()
        if metric not in known:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"unknown metric {metric!r}; known: {', '.join(sorted(known))}")
        if request.mode == pb.GetBestRequest.MODE_UNSPECIFIED:
            maximize = metric not in registry.lower_is_better()
        else:
            maximize = request.mode == pb.GetBestRequest.MODE_MAX
        eval_set = self._set(request.eval_set)
        if eval_set is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, self._unknown_set(request.eval_set))
        record = self.store.best(metric, maximize, run=self._run(request.run_id), eval_set=eval_set)
        if record is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no successful evaluation has {metric!r} yet")
        answer = to_proto(record)
        exported = self.exporter.current() if self.exporter and eval_set == DEFAULT_SET else None
        if exported and (exported["step"], exported["checkpoint"]) == (record.step, record.checkpoint):
            answer.export_path = str(self.exporter.path())
        return pb.GetBestResponse(evaluation=answer)

    async def ListRuns(self, request, context):
        metric = request.metric or "exact_match"
        known = set(registry.names()) | self.store.metric_names()
        if metric not in known:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"unknown metric {metric!r}; known: {', '.join(sorted(known))}")
        if not 0 <= request.page_size <= 1000:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "page_size must be within 1..1000 (0: 100)")
        try:
            offset = decode_runs_token(request.page_token) if request.page_token else 0
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        limit = request.page_size or 100
        maximize = metric not in registry.lower_is_better()
        records = await asyncio.to_thread(self.model_dir.runs)
        evaluated = {run: (count, newest) for run, count, newest in self.store.run_summaries()}
        order = list(evaluated) + sorted(set(records) - set(evaluated),
                                         key=lambda r: str(records[r]["revisions"][0].get("at", "")),
                                         reverse=True)
        answer = pb.ListRunsResponse(next_page_token=encode_runs_token(offset + limit)
                                     if offset + limit < len(order) else "")
        for run in order[offset:offset + limit]:
            evaluations, newest = evaluated.get(run, (0, 0))
            summary = answer.runs.add(run_id=run, evaluations=evaluations, latest_step=newest)
            if run in records:
                self._describe(summary, records[run])
            best = self.store.best(metric, maximize, run=run)
            if best is not None:
                summary.best_value, summary.best_step = best.metrics[metric], best.step
            reached = self.store.first_reaching(metric, request.target, maximize, run) \
                if request.HasField("target") else None
            if reached is not None:
                summary.target_step = reached.step
                if reached.train_seconds is not None:
                    summary.time_to_target.CopyFrom(duration(reached.train_seconds))
        return answer

    async def GetRun(self, request, context):
        if request.run_id and not RUN_ID.fullmatch(request.run_id):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"run_id {request.run_id[:80]!r} is not a run id (letters, digits, . _ -)")
        run_id = request.run_id or self.status().run_id
        record = await asyncio.to_thread(self.model_dir.run_record, run_id) if run_id else None
        if record is None:
            await context.abort(grpc.StatusCode.NOT_FOUND,
                                f"run {run_id or '(current)'}: not recorded in {self.checkpoint_dir} "
                                "(ListRuns lists the runs)")
        return pb.GetRunResponse(run_id=run_id, record_json=json.dumps(record))

    async def Compare(self, request, context):
        if request.samples < 0 or not 0 <= request.confidence < 1:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "samples must be ≥ 0 and confidence "
                                "within (0, 1) (0: the evaluator's own)")
        drawn = Bootstrap(samples=request.samples or self.bootstrap.samples,
                          confidence=request.confidence or self.bootstrap.confidence,
                          seed=self.bootstrap.seed)
        found = []
        for name, ref in (("a", request.a), ("b", request.b)):
            record, problem = self._resolve(ref)
            if problem is None:
                data = self.store.image_stats(record)
                if data is None:
                    problem = (f"step {record.step} (run {record.run}) was recorded before per-image "
                               "statistics were kept: it cannot be compared")
            if problem is not None:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{name}: {problem}")
            found.append((record, data))
        (record_a, data_a), (record_b, data_b) = found
        stats_a, stats_b = ImageStats.from_bytes(data_a), ImageStats.from_bytes(data_b)
        try:
            comparisons, not_compared = await asyncio.to_thread(bootstrap.compare, stats_a, stats_b, drawn)
        except bootstrap.NotPaired as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"step {record_a.step} and step {record_b.step} were {exc}: a paired "
                                "comparison needs evaluations of the same images (the same set and size)")
        return pb.CompareResponse(
            a=to_proto(record_a), b=to_proto(record_b), images=len(stats_a),
            bootstrap=bootstrap_proto(drawn.as_dict()),
            only_in_a=sorted(set(record_a.metrics) - set(record_b.metrics)),
            only_in_b=sorted(set(record_b.metrics) - set(record_a.metrics)),
            not_compared={**{m: DESCRIBES for m in set(record_a.metrics) & set(record_b.metrics)
                             if m not in {c.metric for c in comparisons}}, **not_compared},
            comparisons=[pb.MetricComparison(
                metric=c.metric, a=c.a, b=c.b, difference=c.difference,
                interval=pb.Interval(lower=c.lower, upper=c.upper), p_value=c.p_value,
                significant=c.significant, higher_is_better=c.metric not in registry.lower_is_better())
                for c in comparisons])

    def _resolve(self, ref: pb.EvaluationRef) -> tuple[Record | None, str | None]:
        """The record ``ref`` names, or why there is none (one line)."""
        if ref.run_id and ref.run_id != ALL_RUNS and not RUN_ID.fullmatch(ref.run_id):
            return None, f"run_id {ref.run_id[:80]!r} is not a run id (letters, digits, . _ -)"
        run, eval_set = self._run(ref.run_id), self._set(ref.eval_set)
        if run == ALL_RUNS:
            return None, "name one run (run_id '*' means every run)"
        if eval_set is None:
            return None, self._unknown_set(ref.eval_set)
        which = ref.WhichOneof("at")
        if which is None:
            return None, "name a step or best=METRIC"
        if which == "best":
            known = set(registry.names()) | self.store.metric_names()
            if ref.best not in known:
                return None, f"unknown metric {ref.best!r}; known: {', '.join(sorted(known))}"
            record = self.store.best(ref.best, ref.best not in registry.lower_is_better(), run=run,
                                     eval_set=eval_set)
            return (record, None) if record is not None else \
                (None, f"run {run} has no successful evaluation with {ref.best!r}")
        records = self.store.at_step(run, ref.step, eval_set=eval_set)
        if not records:
            on = "" if eval_set == DEFAULT_SET else f" on set {eval_set}"
            return None, f"step {ref.step} of run {run} was never evaluated{on}"
        if records[0].status != "ok":
            return None, f"step {ref.step} of run {run} was {records[0].status}: {records[0].reason}"
        return records[0], None

    def _describe(self, summary: pb.RunSummary, record: dict) -> None:
        """The run's start, step, --steps and state, from its record (``showtell runs``' rules)."""
        status = self.status()
        current = summary.run_id == status.run_id
        local = not is_url(self.checkpoint_dir)
        training = current and (held(self.checkpoint_dir, "trainer") if local else True)
        newest = status.last_seen_step if status.last_seen_step >= 0 else None
        row = run_records.summary(summary.run_id, record, self.checkpoint_dir, current=current,
                                  training=training, newest_checkpoint=newest)
        if row is None:
            return
        summary.step, summary.steps, summary.status = row.step, row.steps or 0, row.status
        set_started(summary, row.started)

    async def GetStatus(self, request, context):
        status = self.status()
        total, bad = self.store.counts()
        latest = self.store.latest()
        return pb.GetStatusResponse(status=pb.EvaluatorStatus(
            checkpoint_dir=self.checkpoint_dir, policy=self.policy,
            last_seen_step=status.last_seen_step, evaluating_step=status.evaluating_step,
            pending_steps=status.pending_steps, evaluations=total, failures=bad,
            uptime=duration(time.monotonic() - status.started), observer=self.observer,
            last_error=status.last_error, best_export=best_export_proto(self.exporter),
            run_id=status.run_id, runs=self.store.runs(), eval_sets=self.eval_sets,
            last_costs=costs_proto(latest.costs) if latest is not None else None,
            **_progress_fields(status.progress), parts=status.parts,
            waiting_for_parts=[pb.WaitingForParts(run_id=w.run, step=w.step, checkpoint=w.checkpoint,
                                                  missing_parts=w.missing) for w in status.waiting_for_parts],
            tracking=tracking_proto(self.tracking),
        ))

    async def Watch(self, request, context):
        """Replay (step order) the requested run after ``after_step`` — and, when that is not the
        current run any more, the current run in full — then live records (arrival order)
        until the client cancels; ends UNAVAILABLE when the evaluator stops, so clients know
        to reconnect.  Live records are always the current run's: only its checkpoints are
        evaluated.

        Each message is written with ``context.write`` rather than yielded: a client that goes
        away while a write waits on flow control (a replay it never read) fails that write, and
        a yielded message's failure is logged by gRPC as an error with a traceback per stream."""
        async for message in self._watch(request, context):
            try:
                await context.write(message)
            except Exception as exc:
                log.debug("a Watch client went away mid-write (%s)", type(exc).__name__)
                return

    async def _watch(self, request, context):
        after = request.after_step
        if after < -1:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"after_step must be ≥ -1 (got {after})")
        if self.streams >= self.max_streams:
            log.warning("refused a Watch stream: %d open (--max-streams)", self.streams)
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"this evaluator already serves {self.streams} Watch streams "
                                f"(--max-streams {self.max_streams}); retry later or raise the limit")
        eval_set = self._set(request.eval_set, every=True)
        if eval_set is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, self._unknown_set(request.eval_set))
        feed = self.feed
        assert feed is not None, "attach() the service to the server's loop first"
        if feed.closed:
            await context.abort(grpc.StatusCode.UNAVAILABLE, STOPPING)
        await context.send_initial_metadata(())  # headers now: the client knows it is connected
        self.streams += 1
        try:
            cursor = self.store.max_rowid()
            current = self.status().run_id
            run = request.run_id or current
            for record in self.store.replay(after, max_rowid=cursor, run=run, eval_set=eval_set):
                yield watch_message(record)
            if run not in (current, ALL_RUNS):
                for record in self.store.replay(-1, max_rowid=cursor, run=current, eval_set=eval_set):
                    yield watch_message(record)
            while True:
                arrivals = feed.since(cursor)
                for arrival in arrivals:
                    cursor = arrival.rowid
                    evaluation = arrival.message.evaluation
                    if eval_set not in (ALL_SETS, evaluation.eval_set):
                        continue
                    if arrival.step > after or evaluation.run_id != run:
                        yield arrival.message
                if arrivals:
                    continue
                if feed.closed:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, STOPPING)
                await feed.wait()
        finally:
            self.streams -= 1


def _progress_fields(progress: Progress | None) -> dict:
    if progress is None:
        return {}
    return {"images_done": progress.done, "images_total": progress.total,
            "time_left": duration(progress.seconds_left())}
