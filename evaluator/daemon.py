"""The evaluator's assembly, from one typed ``EvaluatorConfig``: ``build_evaluator`` makes the
checkpoint evaluator both ways use; ``evaluate_once`` evaluates one checkpoint (``--once``); ``run``
wires the service together and runs it until SIGTERM/SIGINT — or until a
``--until-step`` / ``--max-evaluations`` / ``--exit-when-trained`` condition says it is done.
``showtell evaluate`` parses its flags into the config and calls one of the two; so can Python.
Stopped by a signal before such a condition was met, it exits 128 + the signal (a job's
evaluator is not done); with none, a signal is its normal end (exit 0).

Two threads of control: the asyncio event loop (main thread) serves gRPC; the ``evaluation``
thread watches, restores and validates.  Between checkpoints both sleep.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
from contextlib import nullcontext
from dataclasses import dataclass

from showtell.api.contract import DEFAULT_SET
from showtell.api.transport import LoadedSecurity, check_listen_address
from showtell.captioning.model.restoring import latest_checkpoint
from showtell.common import exposition
from showtell.common.errors import ShowtellError
from showtell.common.exposition import PrometheusEndpoint
from showtell.common.locks import DirectoryLock
from showtell.common.model_dir import ModelDir
from showtell.common.processes import signal_exit_code
from showtell.common.tracking import Tracker, require_client
from showtell.evaluator.config import EvaluatorConfig
from showtell.evaluator.loop.controller import EvalController
from showtell.evaluator.loop.merger import Merger
from showtell.evaluator.loop.protocol import EvalResult
from showtell.evaluator.loop.sizing import AUTO, RunSizes
from showtell.evaluator.loop.status import Broadcast
from showtell.evaluator.loop.watcher import CheckpointWatcher
from showtell.evaluator.records.actions import ExportBest, HParamsSession, WriteSummaries, log_record
from showtell.evaluator.records.best_export import BestExport
from showtell.evaluator.records.parts_dir import PartsDir
from showtell.evaluator.records.recorder import Recorder
from showtell.evaluator.records.store import Store
from showtell.evaluator.records.summaries import EvalSummaries
from showtell.evaluator.records.tracking import Outbox
from showtell.evaluator.scoring.bootstrap import Bootstrap, export_judge
from showtell.evaluator.scoring.evaluation import CheckpointEvaluator
from showtell.evaluator.scoring.features import FeatureStore
from showtell.evaluator.scoring.scorers import CaptionScorer, resolve_tokenizer
from showtell.evaluator.serving.prometheus import EvaluatorFigures
from showtell.evaluator.serving.server import MetricsServer
from showtell.evaluator.serving.service import MetricsService

log = logging.getLogger(__name__)
# A finite evaluator that is done waits this long for the tracker to take its last records (they
# stay in the history otherwise, sent by the next evaluator on the work dir).
TRACKING_FLUSH_SECS = 30.0


def build_evaluator(config: EvaluatorConfig, model_dir: ModelDir) -> CheckpointEvaluator:
    """The checkpoint evaluator ``config`` describes, of ``model_dir`` (``config.model_dir`` as this
    process opened it): its sets, scorers, bootstrap and kept features (in its work dir; none
    without one).  ``--max-eval-examples auto`` starts unlimited: the controller sizes each
    evaluation."""
    evaluation, work = config.evaluation, config.work
    # METEOR's JVM takes seconds to start: the first evaluation starts it, not the constructor.
    return CheckpointEvaluator(
        model_dir, config.data,
        None if evaluation.max_eval_examples == AUTO else evaluation.max_eval_examples, evaluation.beam_size,
        scorer=lambda: CaptionScorer(meteor=evaluation.meteor, tokenizer=evaluation.tokenizer),
        jit_compile=evaluation.jit_compile, bootstrap=Bootstrap(evaluation.bootstrap, evaluation.confidence),
        sets=config.eval_sets,
        features=FeatureStore(work.features if work else None, evaluation.feature_cache_keep),
        shard=config.sharding.shard.pair if config.sharding.split else None)


def evaluate_once(config: EvaluatorConfig, checkpoint: str | None = None) -> EvalResult:
    """Evaluate ``checkpoint`` (default: the newest) and return its result (the other sets' in
    ``others``).  Features are kept only in a work dir named for it, held as the service holds it
    (refused while a service evaluates there: one writer per cache)."""
    _prepare(config)
    work = config.work
    with DirectoryLock(directory=work.root, role="evaluator", flag="--work-dir") if work else nullcontext():
        model_dir = ModelDir(config.model_dir)
        evaluator = build_evaluator(config, model_dir)
        try:
            return evaluator.evaluate(checkpoint or latest_checkpoint(model_dir))
        finally:
            evaluator.close()


def run(config: EvaluatorConfig, security: LoadedSecurity) -> int:
    """The service on ``config``: one per work dir (a second is refused by name), its address and
    Prometheus port checked before TensorFlow starts; returns the exit code."""
    _prepare(config)
    require_client(config.tracking)
    with DirectoryLock(directory=config.work.root, role="evaluator", flag="--work-dir"):
        check_listen_address(config.serve.host, config.serve.port)
        if config.serve.health_port is not None:
            check_listen_address(config.serve.host, config.serve.health_port, "--health-port")
        endpoint = exposition.serve("evaluator", config.monitoring)
        try:
            return serve(config, security, endpoint)
        finally:
            if endpoint is not None:
                endpoint.close()


def _prepare(config: EvaluatorConfig) -> None:
    """Before anything is built: ``--tokenizer ptb`` without Java is one line; TensorFlow's thread
    pools sized by ``--threads``."""
    resolve_tokenizer(config.evaluation.tokenizer)
    threads = config.evaluation.threads
    if threads:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)


def serve(config: EvaluatorConfig, security: LoadedSecurity,
          endpoint: PrometheusEndpoint | None = None) -> int:
    """Run the service; its figures go to ``endpoint`` (``--prometheus-port``) when there is one."""
    exit_code, abandoned = asyncio.run(_serve(config, security, endpoint))
    if abandoned:
        if endpoint is not None:
            endpoint.close()  # the scrapes in flight end whole before the process does
        # An evaluation still inside TensorFlow's C++ runtime: the interpreter's shutdown would
        # tear the runtime down under it and abort the process (exit -6, found by the chaos soak
        # SIGTERMing mid-evaluation).  Everything is closed and recorded: leave without it.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exit_code)
    return exit_code


@dataclass
class _Components:
    """The service's objects, made in one place: started in order, stopped in reverse.  A part of a
    split evaluation but part 0 serves nothing: it evaluates and publishes (``server`` None)."""

    evaluator: CheckpointEvaluator
    store: Store
    summaries: EvalSummaries | None
    controller: EvalController
    watchers: list[CheckpointWatcher]
    server: MetricsServer | None
    own: Store | None = None  # a part's own history of its parts (a split evaluation)
    outbox: Outbox | None = None  # the history to MLflow (--tracking-uri)


def _split_part(config: EvaluatorConfig, model_dir: ModelDir, evaluator: CheckpointEvaluator,
                parts: PartsDir, security: LoadedSecurity) -> _Components:
    """A part of a split evaluation that does not merge: it evaluates its images of every checkpoint
    and publishes them (``--parts-dir``); part 0 records and serves.  It answers health alone
    (probes, compose's health check)."""
    own = Store(config.work.own_parts)
    controller = EvalController(
        model_dir=model_dir, evaluator=evaluator, store=own, pins=config.work.pins,
        recorder=Recorder(store=own, work_root=config.work.root, publish=parts.publish),
        policy=config.watch.policy, actions=[_log_part], finish=config.finish,
        arrival_timeout=config.watch.arrival_timeout)
    watcher = CheckpointWatcher(model_dir.root, controller.on_change, config.watch.poll_secs,
                                also=ModelDir.SIGNALS)
    return _Components(evaluator, own, None, controller, [watcher], _server(None, config.serve, security))


def _parts_dir(config: EvaluatorConfig, data: dict[str, str]) -> PartsDir:
    """The parts dir as this part sees it, its plan checked (another split's is refused); ``data``:
    each set's fingerprint of the images one evaluator evaluates — the data, whatever its path."""
    shard, evaluation = config.sharding.shard, config.evaluation
    plan = {"sets": [[DEFAULT_SET, evaluation.max_eval_examples],
                     *([s.name, s.max_examples] for s in config.eval_sets)],
            "beam_size": evaluation.beam_size, "data": data}
    parts = PartsDir(config.sharding.parts_dir, shard.index, shard.count, plan)
    parts.check_plan()
    return parts


def _part_0(config: EvaluatorConfig, evaluator: CheckpointEvaluator, parts: PartsDir, merged: Recorder,
            actions: list) -> tuple[Recorder, Store, Merger, list]:
    """Part 0 of a split evaluation: its own parts recorded in a history of their own and
    published; the merger records every part's, merged, through ``merged`` and ``actions`` — the
    history the service serves.  Its controller's recorder, own history, merger and actions."""
    own = Store(config.work.own_parts)
    merger = Merger(parts=parts, evaluator=evaluator, recorder=merged, actions=actions)
    return Recorder(store=own, work_root=config.work.root, publish=parts.publish), own, merger, [_log_part]


def _log_part(record) -> None:
    log.info("step %d: this part %s%s", record.step, "published" if record.status == "ok" else record.status,
             f" ({record.reason})" if record.reason else "", extra={"run": record.run, "step": record.step})


def _exporters(config: EvaluatorConfig, store: Store,
               evaluator: CheckpointEvaluator) -> dict[str, BestExport]:
    """``--export-best``'s exporter of each evaluation set ({} without it)."""
    exporters: dict[str, BestExport] = {}
    if config.export.export_best:
        for name in (DEFAULT_SET, *(s.name for s in config.eval_sets)):
            exporter = BestExport.parse(config.export.export_best, config.work.exports_of(name),
                                        config.export.export_keep, when=config.export.export_best_when)
            exporter.judge = export_judge(
                lambda run, step, ckpt, name=name: store.image_stats_at(run, step, ckpt, name),
                exporter.metric, exporter.maximize, evaluator.bootstrap)
            exporters[name] = exporter
    return exporters


def _outbox(config: EvaluatorConfig, store: Store, model_dir: ModelDir,
            exporters: dict[str, BestExport]) -> Outbox | None:
    """``--tracking-uri``'s outbox of the history (and of each set's exports); None without one."""
    if not config.tracking.enabled:
        return None
    return Outbox(tracker=Tracker(config.tracking), store=store, marks_path=config.work.tracking,
                  model_dir=model_dir, exports={name: e.base for name, e in exporters.items()},
                  registered_model=config.export.registered_model)


def _components(config: EvaluatorConfig, security: LoadedSecurity, loop: asyncio.AbstractEventLoop,
           endpoint: PrometheusEndpoint | None) -> _Components:
    model_dir, workdir, serving = ModelDir(config.model_dir), config.work, config.serve
    auto = config.evaluation.max_eval_examples == AUTO
    evaluator = build_evaluator(config, model_dir)  # its JVM starts in the evaluation thread
    # another split, or other data (a copy with other bytes, another seed): refused before anything
    parts = _parts_dir(config, evaluator.set_fingerprints()) if config.sharding.split else None
    workdir.root.mkdir(parents=True, exist_ok=True)
    if parts is not None and not config.sharding.shard.merges:
        return _split_part(config, model_dir, evaluator, parts, security)
    store = Store(workdir.history)
    summaries = EvalSummaries(str(workdir.summaries), evaluator.files)
    exporters = _exporters(config, store, evaluator)
    exporter = exporters.get(DEFAULT_SET)
    # Reading the newest version first also removes what a crashed export left.
    if exporter is not None and exporter.current() is not None:
        log.info("--export-best: newest export %s", exporter.describe())
    broadcast = Broadcast()
    # Watch streams hear of a record first; the summaries (drawing sample images) and an export
    # follow on the same thread.
    actions = [broadcast.notify, log_record, WriteSummaries(summaries), HParamsSession(model_dir, summaries)]
    if exporters:
        actions.append(ExportBest(exporters, evaluator, merged=config.sharding.split))
    outbox = _outbox(config, store, model_dir, exporters)
    if outbox is not None:  # told after the export: a new best is registered with its record
        actions.append(outbox)
    if endpoint is not None:
        figures = EvaluatorFigures(registry=endpoint.registry, status=lambda: controller.status, store=store,
                                   streams=lambda: service.streams,
                                   sets=(DEFAULT_SET, *(s.name for s in config.eval_sets)),
                                   tracking_backlog=(lambda: outbox.backlog) if outbox else None)
        actions.append(figures.record)
    recorder, own, merger = Recorder(store=store, work_root=workdir.root), None, None
    if parts is not None:
        recorder, own, merger, actions = _part_0(config, evaluator, parts, recorder, actions)
    controller = EvalController(model_dir=model_dir, evaluator=evaluator, store=own or store,
                                recorder=recorder, pins=workdir.pins,
                                policy=config.watch.policy, actions=actions, finish=config.finish,
                                arrival_timeout=config.watch.arrival_timeout,
                                sizes=RunSizes(workdir.auto_sizes) if auto else None, merge=merger,
                                records=store)
    # The finished marker ends --exit-when-trained; a new run id (a synced copy's record may
    # land after its checkpoints) changes which checkpoints are still to evaluate.
    watchers = [CheckpointWatcher(model_dir.root, controller.on_change, config.watch.poll_secs,
                                  also=ModelDir.SIGNALS)]
    if merger is not None:  # another part published: merge
        watchers.append(CheckpointWatcher(str(config.sharding.parts_dir), controller.on_published,
                                          config.watch.poll_secs, also=merger.parts.signals))
    watcher = watchers[0]
    service = MetricsService(store=store, status=lambda: controller.status, broadcast=broadcast,
                             policy=config.watch.policy, model_dir=model_dir, observer=watcher.kind,
                             exporter=exporter, max_streams=serving.max_streams,
                             bootstrap=evaluator.bootstrap,
                             eval_sets=(DEFAULT_SET, *(s.name for s in config.eval_sets)), tracking=outbox)
    service.attach(loop)
    return _Components(evaluator, store, summaries, controller, watchers, _server(service, serving, security),
                       own, outbox)


def _server(service: MetricsService | None, serving, security: LoadedSecurity) -> MetricsServer:
    """The gRPC server (``service`` None: health alone), its address taken since the CLI's check
    one line."""
    try:
        return MetricsServer(service, serving.host, serving.port, security=security,
                             health_port=serving.health_port)
    except RuntimeError as exc:  # grpc's "Failed to bind to address …"
        raise ShowtellError(f"--host {serving.host} --port {serving.port}: cannot listen there; is another "
                            "evaluator using it? pick another --port (0: any free one)") from exc


class _EvaluationThread:
    """The ``evaluation`` thread: the controller's loop; when it ends, for any reason, the service stops.
    ``exit_code`` 1 if the loop failed (not when a shutdown cut it short)."""

    def __init__(self, controller: EvalController, loop: asyncio.AbstractEventLoop,
                 stop: asyncio.Event) -> None:
        self.controller, self.loop, self.stop, self.exit_code = controller, loop, stop, 0
        self.thread = threading.Thread(target=self._work, name="evaluation", daemon=True)

    def _work(self) -> None:
        try:
            self.controller.run()
        except Exception:
            if self.controller.stopping.is_set():  # cut short by the shutdown (the JVM closed under it …)
                log.debug("the evaluation in progress was abandoned while stopping", exc_info=True)
            else:
                log.exception("evaluation loop failed")
                self.exit_code = 1
        finally:
            self.loop.call_soon_threadsafe(self.stop.set)


async def _serve(config: EvaluatorConfig, security: LoadedSecurity,
                 endpoint: PrometheusEndpoint | None) -> tuple[int, bool]:
    """The service until it stops: (exit code, whether an evaluation was abandoned running)."""
    loop = asyncio.get_running_loop()
    components = _components(config, security, loop, endpoint)
    stop, stopped_by = asyncio.Event(), []

    def on_signal(sig: signal.Signals) -> None:
        log.info("%s received: stopping", sig.name)
        stopped_by.append(sig)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    evaluation = _EvaluationThread(components.controller, loop, stop)
    try:
        # Watching before the health service says SERVING: a checkpoint named and deleted (--keep)
        # while the JVM starts is still seen, and recorded skipped (the chaos soak found the gap).
        for watcher in components.watchers:
            watcher.start()
            await asyncio.to_thread(watcher.ready.wait, 30)
        if components.server is not None:
            await components.server.start()
        if components.outbox is not None:
            components.outbox.start()
        finish = config.finish.describe()
        shard = config.sharding.shard if config.sharding.split else None
        log.info("work dir %s; policy %s; observer %s%s%s", config.work.root, config.watch.policy,
                 components.watchers[0].kind, f"; ends when {finish}" if finish else "",
                 f"; part {shard} of every evaluation, results in --parts-dir {config.sharding.parts_dir}"
                 + ("" if shard.merges else ", merged and served by part 0") if shard else "")
        evaluation.thread.start()
        await stop.wait()
    finally:
        await _shut_down(components, evaluation.thread)
    code = _exit_code(evaluation.exit_code, stopped_by, config, components.controller)
    return code, evaluation.thread.is_alive()


async def _shut_down(components: _Components, thread: threading.Thread) -> None:
    """In order: no new evaluation, no new RPC, no new event; an evaluation in progress is
    abandoned (no row: it runs again after a restart); then nothing recorded from here on."""
    components.controller.stop()
    if components.server is not None:
        await components.server.stop()
    for watcher in components.watchers:
        watcher.stop()
    if thread.ident is not None:
        await asyncio.to_thread(thread.join, 2)
        if thread.is_alive():
            log.info("the evaluation in progress is abandoned (it runs again after a restart)")
    await asyncio.to_thread(components.controller.recorder.close)
    merger = components.controller.merge
    if isinstance(merger, Merger):
        await asyncio.to_thread(merger.recorder.close)
    if components.outbox is not None:  # done (--exit-when-trained …): its last records sent first
        flush = TRACKING_FLUSH_SECS if components.controller.done else 0.0
        await asyncio.to_thread(components.outbox.stop, flush)
    components.evaluator.close()
    if components.summaries is not None:
        components.summaries.close()
    components.store.close()
    if components.own is not None:
        components.own.close()


def _exit_code(code: int, stopped_by: list[signal.Signals], config: EvaluatorConfig,
               controller: EvalController) -> int:
    """A signal before a finish condition was met: 128 + the signal (not done); else ``code``."""
    finish = config.finish.describe()
    if code == 0 and stopped_by and finish and not controller.done:
        code = signal_exit_code(stopped_by[0])
        log.info("stopped by %s before %s: exit %d (not done)", stopped_by[0].name, finish, code)
    return code
