"""Wire the evaluator service together and run it until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from pathlib import Path

from evaluator.best_export import BestExport
from evaluator.evaluation import CheckpointEvaluator
from evaluator.runner import EvalRunner
from evaluator.scorers import CaptionScorer
from evaluator.server import MetricsServer
from evaluator.service import MetricsService
from evaluator.store import Store
from evaluator.summaries import EvalSummaries
from evaluator.watcher import CheckpointWatcher
from showtell.transport import LoadedSecurity

log = logging.getLogger(__name__)


def serve(args: argparse.Namespace, work_dir: Path, security: LoadedSecurity) -> int:
    model_dir = str(args.model_dir)
    evaluator = CheckpointEvaluator(model_dir, args.data, args.max_eval_examples, args.beam_size)
    work_dir.mkdir(parents=True, exist_ok=True)
    store = Store(work_dir / "evaluations.sqlite")
    summaries = EvalSummaries(str(work_dir / "eval"))
    exporter = BestExport.parse(args.export_best, work_dir) if args.export_best else None
    runner = EvalRunner(model_dir, evaluator, store, work_dir, args.policy, summaries, exporter)
    watcher = CheckpointWatcher(model_dir, runner.on_change, args.poll_secs)
    service = MetricsService(store, runner, model_dir, watcher.kind)
    server = MetricsServer(service, args.host, args.port, security=security)

    stop = threading.Event()

    def on_signal(signum, frame) -> None:
        log.info("%s received: stopping", signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)

    def work() -> None:
        # METEOR's JVM takes seconds to start: do it here, not before the server answers.
        evaluator.scorer = CaptionScorer(meteor=args.meteor)
        watcher.start()
        try:
            runner.run()
        except Exception:
            log.exception("evaluation loop failed")
            stop.set()

    server.start()
    log.info("work dir %s; policy %s; observer %s", work_dir, args.policy, watcher.kind)
    thread = threading.Thread(target=work, name="evaluation", daemon=True)
    thread.start()
    try:
        stop.wait()
    finally:
        runner.stopping.set()
        runner.wake.set()
        server.stop()
        watcher.stop()
        # An evaluation in progress is abandoned (no row): it runs again after a restart.
        thread.join(timeout=2)
        if evaluator.scorer is not None:
            evaluator.scorer.close()
        summaries.close()
        store.close()
    return 0
