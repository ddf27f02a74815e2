"""Runs, not just paths: a model dir wiped and trained again, or replaced by a rename, is a new
run — its checkpoints (same step numbers, same file names) are evaluated, and the service
answers for the current run unless asked for another (or all)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from showtell.api.contract import ALL_RUNS
from showtell.evaluator.store import Record, Store
from showtell.v1 import metrics_pb2 as pb
from tests.conftest import copy_model, metrics_stub, start_evaluator, train_more, wait_for

OBSERVERS = (("inotify", ()), ("polling", ("--poll-secs", "1")), ("gfile-polling", ("--poll-secs", "1")))


def _run_id(model_dir: Path) -> str:
    return json.loads((model_dir / "showtell-model.json").read_text())["run_id"]


def _list(stub, run: str = "") -> list[tuple[str, int, str]]:
    page = stub.ListEvaluations(pb.ListEvaluationsRequest(limit=1000, run_id=run), timeout=10)
    return [(e.run_id, e.global_step, pb.Evaluation.Status.Name(e.status)) for e in page.evaluations]


@pytest.mark.e2e
def test_a_model_dir_started_over_is_a_new_run_under_every_observer(
        tiny_data: Path, tiny_model: Path, tmp_path: Path, procs):
    model_dir = copy_model(tiny_model, tmp_path / "model")
    run_a = _run_id(model_dir)
    stubs = {}
    for name, extra in OBSERVERS:
        location = f"file://{model_dir}" if name == "gfile-polling" else str(model_dir)
        _, port = start_evaluator(procs, location, tiny_data, tmp_path / f"w-{name}",
                                  tmp_path / f"{name}.log", "--policy", "all", "--max-eval-examples", "4",
                                  *extra)
        stubs[name] = metrics_stub(port)[1]
    for name, stub in stubs.items():
        wait_for(lambda stub=stub: _list(stub) == [(run_a, 2, "OK"), (run_a, 4, "OK")], 240, f"{name}: run A")

    # wiped and trained again: same path, same step numbers, same file names
    shutil.rmtree(model_dir)
    train_more(tiny_data, model_dir, 4, "--save-every-steps", "2", "--keep", "10")
    run_b = _run_id(model_dir)
    assert run_b != run_a
    for name, stub in stubs.items():
        wait_for(lambda stub=stub: _list(stub) == [(run_b, 2, "OK"), (run_b, 4, "OK")], 240, f"{name}: run B")

    # replaced by a rename (a new run trained elsewhere, moved into place)
    fresh = tmp_path / "fresh"
    train_more(tiny_data, fresh, 2, "--save-every-steps", "2", "--keep", "10")
    run_c = _run_id(fresh)
    os.rename(model_dir, tmp_path / "old")
    os.rename(fresh, model_dir)
    for name, stub in stubs.items():
        wait_for(lambda stub=stub: _list(stub) == [(run_c, 2, "OK")], 240, f"{name}: run C")
        everything = _list(stub, ALL_RUNS)
        assert sorted(everything) == sorted([(run_a, 2, "OK"), (run_a, 4, "OK"), (run_b, 2, "OK"),
                                             (run_b, 4, "OK"), (run_c, 2, "OK")]), (name, everything)
        assert _list(stub, run_a) == [(run_a, 2, "OK"), (run_a, 4, "OK")]
        latest = stub.GetLatest(pb.GetLatestRequest(), timeout=10)
        assert (latest.run_id, latest.global_step) == (run_c, 2)
        status = stub.GetStatus(pb.GetStatusRequest(), timeout=10)
        assert (status.run_id, status.runs) == (run_c, 3)
        log = (tmp_path / f"{name}.log").read_text()
        assert f"run {run_b} (was {run_a}); its checkpoints are evaluated afresh" in log, name


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
