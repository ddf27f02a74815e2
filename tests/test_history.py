"""A corrupt evaluation history (garbage over the SQLite file, or a truncated one): the evaluator
moves it aside with one loud line, starts a fresh history and evaluates again what the state
file names — it serves on instead of crash-looping."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from showtell.api.contract import ALL_RUNS
from showtell.evaluator.records.record import Record
from showtell.evaluator.records.store import Store
from showtell.v1 import metrics_pb2 as pb
from tests.helpers import metrics_stub, start_evaluator, wait_for


def _filled(path: Path, rows: int) -> None:
    store = Store(path)
    for step in range(1, rows + 1):
        store.add(Record(step, f"ckpt-{step}", 0.0, 0.0, 1.0, 4, metrics={"loss": 1.0 / step},
                         samples=[{"caption": "x" * 2000}]))  # enough pages to truncate into
    store.close()


def test_a_truncated_history_is_moved_aside_and_a_fresh_one_starts(tmp_path: Path, caplog):
    path = tmp_path / "evaluations.sqlite"
    _filled(path, 200)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])  # a disk that lost the file's second half
    with caplog.at_level("ERROR"):
        store = Store(path)
    [line] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert line.startswith(f"{path} is not a sound SQLite history (")
    aside = Path(re.search(r"moved aside to (\S+);", line).group(1))
    assert aside.read_bytes() == whole[: len(whole) // 2]  # kept for a post-mortem, untouched
    assert store.latest() is None and store.counts() == (0, 0)
    store.add(Record(7, "ckpt-7", 0.0, 0.0, 1.0, 4, metrics={"loss": 0.5}))
    assert [r.step for r in store.after(-1)] == [7]
    [check] = sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()
    assert check == "ok"


def test_a_history_in_another_format_is_moved_aside_not_migrated(tmp_path: Path, caplog):
    path = tmp_path / "evaluations.sqlite"
    db = sqlite3.connect(path)  # a sound database from another version: a table, user_version 0
    db.executescript("CREATE TABLE evaluations (step INTEGER, checkpoint TEXT);"
                     "INSERT INTO evaluations VALUES (4, '/m/ckpt-4');")
    db.close()
    with caplog.at_level("ERROR"):
        store = Store(path)
    [line] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert line.startswith(f"{path} was written by another version of showtell (history format 0; "
                           "this version reads 5): moved aside to ")
    assert store.latest() is None
    store.add(Record(7, "ckpt-7", 0.0, 0.0, 1.0, 4, metrics={"loss": 0.5}))
    store.close()
    assert Store(path).latest().step == 7  # reopened: its own format is read without a word


FORMAT_2 = """CREATE TABLE evaluations (run TEXT NOT NULL, step INTEGER NOT NULL, checkpoint TEXT NOT NULL,
    checkpoint_mtime REAL NOT NULL, evaluated_at REAL NOT NULL, eval_seconds REAL NOT NULL,
    num_examples INTEGER NOT NULL, metrics TEXT NOT NULL, samples TEXT NOT NULL, status TEXT NOT NULL,
    reason TEXT NOT NULL, scoring TEXT NOT NULL, recorded INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (run, step, checkpoint));
INSERT INTO evaluations VALUES ('r', 4, '/m/ckpt-4', 0, 0, 1, 4, '{"loss": 1.0}', '[]', 'ok', '', '', 1);
INSERT INTO evaluations VALUES ('r', 2, '/m/ckpt-2', 0, 0, 1, 4, '{"loss": 2.0}', '[]', 'ok', '', '', 1);
PRAGMA user_version = 2;"""


def test_a_format_2_history_gains_the_training_time_and_keeps_its_rows(tmp_path: Path, caplog):
    path = tmp_path / "evaluations.sqlite"
    db = sqlite3.connect(path)
    db.executescript(FORMAT_2)
    db.close()
    with caplog.at_level("INFO"):
        store = Store(path)
    assert (f"{path}: history format 2 carried into format 5 (2 rows kept as they were; what they lacked "
            "— intervals, evaluation sets, costs — unknown)") in caplog.text
    old = store.after(-1, run="r")
    assert [(r.step, r.rowid, r.metrics, r.train_seconds, r.intervals, r.eval_set) for r in old] == [
        (2, 2, {"loss": 2.0}, None, {}, "val"), (4, 1, {"loss": 1.0}, None, {}, "val")]  # arrival order kept
    store.add(Record(8, "/m/ckpt-8", 0.0, 0.0, 1.0, 4, metrics={"loss": 0.5}, run="r", train_seconds=151.5))
    store.close()
    reopened = Store(path)  # format 5 now: read without a word
    assert [(r.step, r.train_seconds) for r in reopened.after(-1, run="r")] == [
        (2, None), (4, None), (8, 151.5)]
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 5


def test_a_checkpoints_sets_are_recorded_together_and_read_per_set(tmp_path: Path):
    store = Store(tmp_path / "evaluations.sqlite")
    unseen = Record(6, "/m/ckpt-6", 0.0, 0.0, 1.0, 4, metrics={"loss": 2.5}, run="r", eval_set="unseen",
                    image_stats=b"u")
    stored = store.add(Record(6, "/m/ckpt-6", 0.0, 0.0, 1.0, 4, metrics={"loss": 1.5}, run="r",
                              image_stats=b"v", also=(unseen,)))
    assert [(r.eval_set, r.metrics["loss"]) for r in (stored, *stored.also)] == [
        ("val", 1.5), ("unseen", 2.5)]
    assert stored.also[0].rowid == stored.rowid + 1 and store.has("r", 6, "/m/ckpt-6")
    assert store.latest("r").metrics == {"loss": 1.5} and store.latest("r", eval_set="unseen").metrics == {
        "loss": 2.5}
    assert store.best("loss", False, run="r", eval_set="unseen").eval_set == "unseen"
    assert (store.image_stats(stored), store.image_stats(stored.also[0])) == (b"v", b"u")
    assert [r.eval_set for r in store.page(0, 0, 10, run="r", eval_set="*")] == ["unseen", "val"]
    assert [r.eval_set for r in store.arrived_after(0)] == ["val", "unseen"]  # Watch's feed: every set
    assert store.counts() == (1, 0)  # one checkpoint evaluated
    # a failing insert of the second set leaves neither (one transaction)
    with pytest.raises(TypeError):  # the second row cannot be written (its metrics are not JSON)
        store.add(Record(8, "/m/ckpt-8", 0.0, 0.0, 1.0, 4, run="r",
                         also=(replace(unseen, step=8, checkpoint="/m/ckpt-8", metrics={"loss": object()}),)))
    assert not store.has("r", 8, "/m/ckpt-8")
    store.close()


FORMAT_3 = FORMAT_2.replace("recorded INTEGER NOT NULL DEFAULT 1,", "recorded INTEGER NOT NULL DEFAULT 1, "
                            "train_seconds REAL,").replace("'', 1);", "'', 1, 12.5);").replace(
    "user_version = 2", "user_version = 3").replace("'', 1);\nINSERT", "'', 1, 12.5);\nINSERT")


def test_a_format_3_history_reads_its_old_records_without_intervals_and_never_rewrites_them(
        tmp_path: Path, caplog):
    path = tmp_path / "evaluations.sqlite"
    db = sqlite3.connect(path)
    db.executescript(FORMAT_3)
    before = db.execute("SELECT rowid, * FROM evaluations ORDER BY step").fetchall()
    db.close()
    with caplog.at_level("INFO"):
        store = Store(path)
    assert f"{path}: history format 3 carried into format 5 (2 rows kept as they were" in caplog.text
    [_, old] = store.after(-1, run="r")
    assert (old.metrics, old.train_seconds, old.intervals, old.bootstrap) == ({"loss": 1.0}, 12.5, {}, {})
    assert store.image_stats(old) is None
    new = store.add(Record(8, "/m/ckpt-8", 0.0, 0.0, 1.0, 4, metrics={"loss": 0.5}, run="r",
                           intervals={"loss": [0.4, 0.6]}, bootstrap={"samples": 10}, image_stats=b"stats"))
    assert store.image_stats(new) == b"stats"
    store.close()
    db = sqlite3.connect(path)
    # every old row as it was (its rowid too), no interval, the default set, no costs
    assert db.execute("SELECT rowid, * FROM evaluations WHERE step < 8 ORDER BY step").fetchall() == [
        (*row, None, "val", None) for row in before]
    [again] = Store(path).at_step("r", 8)
    assert (again.intervals, again.bootstrap) == ({"loss": [0.4, 0.6]}, {"samples": 10})


def test_a_second_record_of_a_checkpoint_is_counted_and_said_loudly(tmp_path: Path, caplog):
    """The store used to drop a second record silently (INSERT OR IGNORE), so the chaos soak's
    'evaluated twice' check, which counts rows, could never fire."""
    store = Store(tmp_path / "evaluations.sqlite")
    first = store.add(Record(7, "/m/ckpt-7", 0.0, 0.0, 1.0, 4, metrics={"loss": 0.5}, run="r"))
    with caplog.at_level("ERROR"):
        assert store.add(Record(7, "/m/ckpt-7", 0.0, 9.0, 1.0, 4, metrics={"loss": 0.4}, run="r")) is None
        assert store.add(Record(7, "/m/ckpt-7", 0.0, 9.0, 1.0, 4, status="skipped", run="r")) is None
    assert [r.getMessage() for r in caplog.records] == [
        f"/m/ckpt-7 (step 7, run 'r') recorded {n} times: it was evaluated again, which the evaluator "
        "should never do (a bug: please report it); the first record is kept" for n in (2, 3)]
    [kept] = store.after(-1)
    assert (kept.rowid, kept.metrics, kept.recorded) == (first.rowid, {"loss": 0.5}, 3)
    assert store.add(Record(7, "/m/ckpt-7", 0.0, 0.0, 1.0, 4, run="another")).recorded == 1


@pytest.mark.e2e
def test_an_evaluator_on_a_garbage_history_serves_and_evaluates_again(tiny_data: Path, tiny_model: Path,
                                                                       tmp_path: Path, procs):
    work = tmp_path / "eval"
    work.mkdir()
    garbage = b"this is not a database\n" * 200
    (work / "evaluations.sqlite").write_bytes(garbage)
    log = tmp_path / "eval.log"
    _, port = start_evaluator(procs, tiny_model, tiny_data, work, log, "--policy", "all",
                              "--max-eval-examples", "2")
    channel, stub = metrics_stub(port)
    with channel:
        wait_for(lambda: stub.GetStatus(pb.GetStatusRequest(), timeout=10).status.evaluations >= 2, 300,
                 "ckpt-2 and ckpt-4 evaluated again")
        listed = stub.ListEvaluations(pb.ListEvaluationsRequest(), timeout=10).evaluations
    steps = [e.global_step for e in listed]
    assert steps == [2, 4]
    [line] = [x for x in log.read_text().splitlines() if "is not a sound SQLite history" in x]
    assert "file is not a database" in line and "moved aside to" in line
    [aside] = work.glob("evaluations.sqlite.corrupt-*")
    assert aside.read_bytes() == garbage


@pytest.mark.parametrize("page", [1, 3, 100])
def test_a_replay_read_page_by_page_is_the_history_after_a_step(tmp_path: Path, page: int):
    """``Store.replay`` (a Watch's replay, a page at a time) gives exactly ``after``'s records, in
    step order, whatever the page size — run filter, the cursor and a step recorded twice included."""
    store = Store(tmp_path / "evaluations.sqlite")
    for run, steps in (("a", [5, 1, 3, 9, 7]), ("b", [2, 4])):
        for step in steps:
            store.add(Record(step, f"{run}/ckpt-{step}", 0.0, 0.0, 1.0, 4, metrics={"loss": 1.0}, run=run))
    store.add(Record(3, "a/ckpt-3-again", 0.0, 0.0, 1.0, 4, metrics={"loss": 1.0}, run="a"))
    cursor = store.max_rowid()
    store.add(Record(11, "a/ckpt-11", 0.0, 0.0, 1.0, 4, metrics={"loss": 1.0}, run="a"))  # after the cursor
    for after, run in ((-1, "a"), (3, "a"), (-1, "b"), (1, ALL_RUNS)):
        want = [(r.step, r.checkpoint) for r in store.after(after, run=run) if r.rowid <= cursor]
        got = [(r.step, r.checkpoint) for r in store.replay(after, max_rowid=cursor, run=run, page=page)]
        assert sorted(got) == sorted(want) and [s for s, _ in got] == sorted(s for s, _ in got), (after, run)
    assert [r.step for r in store.replay(-1, max_rowid=cursor, run="a", page=page)] == [1, 3, 3, 5, 7, 9]
    store.close()
