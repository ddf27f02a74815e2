"""Runs, not just paths: a model dir wiped and trained again, or replaced by a rename, is a new
run — its checkpoints (same step numbers, same file names) are evaluated, and the service
answers for the current run unless asked for another (or all)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from showtell.api.client import ALL_RUNS
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


def test_a_history_from_before_run_ids_is_kept(tmp_path: Path):
    path = tmp_path / "evaluations.sqlite"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE evaluations (step INTEGER NOT NULL, checkpoint TEXT NOT NULL,
            checkpoint_mtime REAL NOT NULL, evaluated_at REAL NOT NULL, eval_seconds REAL NOT NULL,
            num_examples INTEGER NOT NULL,
            metrics TEXT NOT NULL, samples TEXT NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL,
            PRIMARY KEY (step, checkpoint));
        INSERT INTO evaluations VALUES (4, '/m/ckpt-4', 1, 2, 3, 8, '{"loss": 1.5}', '[]', 'ok', '');
        INSERT INTO evaluations VALUES (2, '/m/ckpt-2', 1, 2, 3, 8, '{"loss": 2.5}', '[]', 'ok', '');
    """)
    db.close()
    store = Store(path)
    try:
        old = store.after(-1)
        assert [(r.run, r.step, r.metrics["loss"]) for r in old] == [("", 2, 2.5), ("", 4, 1.5)]
        assert [r.step for r in store.arrived_after(0)] == [4, 2]  # arrival order kept
        assert store.has("", 4, "/m/ckpt-4") and not store.has("run-x", 4, "/m/ckpt-4")
        added = store.add(Record(4, "/m/ckpt-4", 1, 5, 3, 8, {"loss": 0.5}, run="run-x"))
        assert added is not None and added.rowid == 3  # the same checkpoint name, another run
        assert store.latest("run-x").metrics == {"loss": 0.5} and store.latest("").metrics == {"loss": 1.5}
        assert store.best("loss", False, run="").step == 4 and store.runs() == 2
    finally:
        store.close()


def test_a_history_from_before_scoring_was_kept_gains_the_column(tmp_path: Path):
    path = tmp_path / "evaluations.sqlite"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE evaluations (run TEXT NOT NULL, step INTEGER NOT NULL, checkpoint TEXT NOT NULL,
            checkpoint_mtime REAL NOT NULL, evaluated_at REAL NOT NULL, eval_seconds REAL NOT NULL,
            num_examples INTEGER NOT NULL,
            metrics TEXT NOT NULL, samples TEXT NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL,
            PRIMARY KEY (run, step, checkpoint));
        INSERT INTO evaluations VALUES ('r', 2, '/m/ckpt-2', 1, 2, 3, 8, '{"cider": 0.5}', '[]', 'ok', '');
    """)
    db.close()
    store = Store(path)
    try:
        assert [(r.step, r.scoring) for r in store.after(-1)] == [(2, "")]  # unknown: not made up
        store.add(Record(4, "/m/ckpt-4", 1, 5, 3, 8, {"cider": 0.7}, run="r",
                         scoring="tokenizer=ptb scorers=bleu"))
        assert store.latest("r").scoring == "tokenizer=ptb scorers=bleu"
    finally:
        store.close()
    assert Store(path).latest("r").step == 4  # reopened: the migrated schema is the current one
