"""Runs, not just paths: the history tells runs apart (same step numbers, same file names).  A
model dir wiped and trained again, or replaced by a rename, under every observer:
``tests/test_evaluator_lifecycle.py``; the loop evaluating a new run afresh: ``test_eval_loop.py``."""

from __future__ import annotations

from pathlib import Path

from showtell.api.contract import ALL_RUNS
from showtell.evaluator.records.record import Record
from showtell.evaluator.records.store import Store


def test_runs_are_told_apart_in_the_history(tmp_path: Path):
    store = Store(tmp_path / "evaluations.sqlite")
    try:
        for run, step, loss in (("run-a", 2, 2.5), ("run-a", 4, 1.5), ("run-b", 4, 0.5)):
            assert store.add(Record(step, "/m/ckpt-4" if step == 4 else "/m/ckpt-2", 1, 5, 3, 8,
                                    {"loss": loss}, run=run)) is not None  # same name, another run
        assert store.has("run-a", 4, "/m/ckpt-4") and not store.has("run-c", 4, "/m/ckpt-4")
        assert store.latest("run-b").metrics == {"loss": 0.5}
        assert store.latest("run-a").metrics == {"loss": 1.5}
        assert store.best("loss", False, run="run-a").step == 4 and store.runs() == 2
        assert [r.run for r in store.arrived_after(0)] == ["run-a", "run-a", "run-b"]  # arrival order
        assert store.best("loss", False, run=ALL_RUNS).run == "run-b"
    finally:
        store.close()
