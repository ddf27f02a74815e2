"""A stopping evaluator closes its store and summaries while an evaluation may still be running
in its thread: once ``EvalRunner.close`` has returned, a finished evaluation is dropped (it runs
again after a restart), not written into closed resources — which failed the evaluator with exit 1
after a SIGTERM (the chaos soak's exit-code check found it).  In process: nothing crosses a process
boundary here."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from showtell.evaluator.runner import EvalRunner
from showtell.evaluator.store import Record, Store
from showtell.evaluator.summaries import EvalSummaries
from showtell.evaluator.workdir import WorkDir


def _runner(tmp_path: Path) -> tuple[EvalRunner, Store, EvalSummaries]:
    work = WorkDir(tmp_path)
    store, summaries = Store(work.history), EvalSummaries(str(work.summaries))
    runner = EvalRunner(model_dir=str(tmp_path / "model"), evaluator=None, store=store, work=work,
                        policy="all", summaries=summaries)
    return runner, store, summaries


def _ok(step: int) -> Record:
    return Record(step, f"ckpt-{step}", 0.0, time.time(), 1.0, 4, metrics={"loss": 1.0})


def test_a_record_after_close_is_dropped_not_written_into_closed_resources(tmp_path: Path):
    runner, store, summaries = _runner(tmp_path)
    runner._record(_ok(1))
    assert store.has("", 1, "ckpt-1")
    runner.close()
    summaries.close()
    store.close()
    runner._record(_ok(2))  # the evaluation that finished after the shutdown began: no exception
    reopened = Store(tmp_path / "evaluations.sqlite")
    assert reopened.has("", 1, "ckpt-1") and not reopened.has("", 2, "ckpt-2")


def test_close_waits_for_a_record_being_written(tmp_path: Path):
    runner, store, _ = _runner(tmp_path)
    entered, release = threading.Event(), threading.Event()
    real_add = store.add

    def slow_add(record):
        entered.set()
        release.wait(10)
        return real_add(record)

    store.add = slow_add
    writer = threading.Thread(target=runner._record, args=(_ok(3),))
    writer.start()
    assert entered.wait(10)
    closer = threading.Thread(target=runner.close)
    closer.start()
    closer.join(0.5)
    assert closer.is_alive()  # it waits: the store must not close under the write
    release.set()
    writer.join(10)
    closer.join(10)
    assert not closer.is_alive() and runner.closed and store.has("", 3, "ckpt-3")
