"""The recorder — the one place a record is made durable, then told to the controller's actions.  A stopping
evaluator closes its store and summaries while an evaluation may still be running in its
thread: once ``Recorder.close`` has returned, a finished evaluation is dropped (it runs
again after a restart), not written into closed resources — which failed the evaluator with exit 1
after a SIGTERM (the chaos soak's exit-code check found it).  In process: nothing crosses a process
boundary here."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from showtell.evaluator.records.actions import WriteSummaries
from showtell.evaluator.records.record import Record
from showtell.evaluator.records.recorder import Recorder
from showtell.evaluator.records.store import Store
from showtell.evaluator.records.summaries import EvalSummaries
from showtell.evaluator.records.workdir import WorkDir


def _recorder(tmp_path: Path) -> tuple[Recorder, Store, EvalSummaries]:
    work = WorkDir(tmp_path)
    store, summaries = Store(work.history), EvalSummaries(str(work.summaries))
    return Recorder(store=store, work_root=work.root), store, summaries


def _ok(step: int) -> Record:
    return Record(step, f"ckpt-{step}", 0.0, time.time(), 1.0, 4, metrics={"loss": 1.0})


def test_a_record_after_close_is_dropped_not_written_into_closed_resources(tmp_path: Path):
    recorder, store, summaries = _recorder(tmp_path)
    told: list = []
    actions = [WriteSummaries(summaries), told.append]
    recorder.record(_ok(1), actions)
    assert store.has("", 1, "ckpt-1") and [r.step for r in told] == [1]
    recorder.close()
    summaries.close()
    store.close()
    # The evaluation that finished after the shutdown began: no exception, no action told.
    assert recorder.record(_ok(2), actions) is None and [r.step for r in told] == [1]
    reopened = Store(tmp_path / "evaluations.sqlite")
    assert reopened.has("", 1, "ckpt-1") and not reopened.has("", 2, "ckpt-2")


def test_close_waits_for_a_record_being_written(tmp_path: Path):
    recorder, store, _ = _recorder(tmp_path)
    entered, release = threading.Event(), threading.Event()
    real_add = store.add

    def slow_add(record):
        entered.set()
        release.wait(10)
        return real_add(record)

    store.add = slow_add
    writer = threading.Thread(target=recorder.record, args=(_ok(3),))
    writer.start()
    assert entered.wait(10)
    closer = threading.Thread(target=recorder.close)
    closer.start()
    closer.join(0.5)
    assert closer.is_alive()  # it waits: the store must not close under the write
    release.set()
    writer.join(10)
    closer.join(10)
    assert not closer.is_alive() and recorder.closed and store.has("", 3, "ckpt-3")


def test_a_record_is_stored_then_told_to_each_action_in_order(tmp_path: Path):
    recorder, store, _ = _recorder(tmp_path)
    told: list = []
    actions = [lambda r: told.append(("first", r.step, store.has("", r.step, r.checkpoint))),
               lambda r: told.append(("second", r.step, r.rowid))]
    stored = recorder.record(_ok(4), actions)
    assert stored.rowid > 0 and told == [("first", 4, True), ("second", 4, stored.rowid)]
    again = recorder.record(_ok(4), actions)  # a second record of one checkpoint: counted, the first kept
    assert again is None and len(told) == 2 and store.after(3)[0].recorded == 2
