"""Durable evaluation history: SQLite (WAL) in the evaluator's work dir.

One row per (training run, global step, checkpoint path) — a model dir wiped and trained
again reuses step numbers and file names, so the run tells its checkpoints apart.  A row is
written once, after the evaluation finished (or was recorded as failed/skipped), in one
transaction — so a restarted evaluator sees exactly what was recorded:
nothing is lost, and an evaluation cut short by a crash (no row) simply runs again.  A second
record of the same checkpoint is a defect (an evaluator evaluated it twice): the first record is
kept, the row's ``recorded`` count goes up and one loud line says so — the chaos soak and users
see it instead of a silently ignored insert.

Readers (gRPC threads) and the single writer share one connection behind a lock; WAL
keeps reads cheap while a write is in progress from another process (e.g. a backup).

A history that is not a sound SQLite database (overwritten, truncated by a disk), or one in
another format than ``FORMAT`` (written by another version), is moved aside with one loud log
line, and a fresh one starts: the evaluator keeps serving instead of crash-looping, and the
checkpoints the state file names are evaluated again — with one exception, the changes since: a
format-2, -3 or -4 history is carried into this format's table (its rows copied as they are, with
their rowids; ``train_seconds``, ``intervals`` and ``costs`` unknown where they had none,
``eval_set`` the default) — a new table because the key gained the evaluation set (format 4) and
the costs (format 5).

Several evaluation sets (``--eval-set``): one row per (run, step, checkpoint, set), a checkpoint's
rows written in one transaction — so a checkpoint is recorded for every set or for none.  The
default set's row (``val``) is the checkpoint's: failures and skips are recorded there only, and
what is recorded (``has``), counted and summarised per run is read from it.

Each evaluation's per-image statistics (``evaluator/scoring/bootstrap.py``: what its intervals and
any later paired comparison resample) are kept in ``image_stats``, written in the same transaction
as its row, compressed (≈ 14 numbers an image) and read only when a comparison asks for them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from showtell.api.contract import ALL_RUNS, ALL_SETS, DEFAULT_SET
from showtell.evaluator.records.record import Record, record_from_row

FORMAT = 5  # PRAGMA user_version of a history this version reads and writes
COLUMNS_OF = {  # what a history of an older format has, copied into this one's table
    2: ("run", "step", "checkpoint", "checkpoint_mtime", "evaluated_at", "eval_seconds", "num_examples",
        "metrics", "samples", "status", "reason", "scoring", "recorded"),
}
COLUMNS_OF[3] = (*COLUMNS_OF[2], "train_seconds")
COLUMNS_OF[4] = (*COLUMNS_OF[3], "intervals", "eval_set")
SCHEMA = """
CREATE TABLE IF NOT EXISTS evaluations (
    run TEXT NOT NULL,
    step INTEGER NOT NULL,
    checkpoint TEXT NOT NULL,
    checkpoint_mtime REAL NOT NULL,
    evaluated_at REAL NOT NULL,
    eval_seconds REAL NOT NULL,
    num_examples INTEGER NOT NULL,
    metrics TEXT NOT NULL,
    samples TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT NOT NULL,
    scoring TEXT NOT NULL,
    recorded INTEGER NOT NULL DEFAULT 1,
    train_seconds REAL,
    intervals TEXT,
    eval_set TEXT NOT NULL DEFAULT 'val',
    costs TEXT,
    PRIMARY KEY (run, step, checkpoint, eval_set)
);
CREATE TABLE IF NOT EXISTS image_stats (
    run TEXT NOT NULL,
    step INTEGER NOT NULL,
    checkpoint TEXT NOT NULL,
    eval_set TEXT NOT NULL,
    stats BLOB NOT NULL,
    PRIMARY KEY (run, step, checkpoint, eval_set)
);
"""
STATUSES = ("ok", "failed", "skipped")

log = logging.getLogger(__name__)


class OtherFormat(sqlite3.DatabaseError):
    """A sound SQLite file written by another version of showtell."""


class Store:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        try:
            self._db = self._open()
        except sqlite3.DatabaseError as exc:
            aside = self._move_aside()
            what = ("was written by another version of showtell" if isinstance(exc, OtherFormat)
                    else "is not a sound SQLite history")
            log.error("%s %s (%s): moved aside to %s; starting a fresh one, "
                      "and the checkpoints the state file names are evaluated again", path, what, exc, aside)
            self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            problems = [row[0] for row in db.execute("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise sqlite3.DatabaseError("; ".join(problems[:3]))
            tables = db.execute("SELECT COUNT(*) FROM sqlite_master WHERE type='table'").fetchone()[0]
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if tables and version in COLUMNS_OF:
                rows = self._carry(db, version)
                log.info("%s: history format %d carried into format %d (%d rows kept as they were; "
                         "what they lacked — intervals, evaluation sets, costs — unknown)",
                         self.path, version, FORMAT, rows)
            elif tables and version != FORMAT:
                raise OtherFormat(f"history format {version}; this version reads {FORMAT}")
            db.executescript(SCHEMA)
            db.execute(f"PRAGMA user_version = {FORMAT}")
        except BaseException:
            db.close()
            raise
        return db

    @staticmethod
    def _carry(db: sqlite3.Connection, version: int) -> int:
        """A format-``version`` table's rows (and rowids: Watch's arrival order) into this format's
        table, in one transaction; the old table goes."""
        columns = ", ".join(COLUMNS_OF[version])
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(f"ALTER TABLE evaluations RENAME TO evaluations_format_{version}")
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"INSERT INTO evaluations (rowid, {columns}) SELECT rowid, {columns} "
                       f"FROM evaluations_format_{version}")
            rows = db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
            db.execute(f"DROP TABLE evaluations_format_{version}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return int(rows)

    def _move_aside(self) -> Path:
        """The bad file (and its WAL and shared-memory files) renamed, kept for a post-mortem."""
        aside = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
        for suffix in ("", "-wal", "-shm"):
            source = Path(f"{self.path}{suffix}")
            if source.exists():
                os.replace(source, f"{aside}{suffix}")
        return aside

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def add(self, record: Record) -> Record | None:
        """Record an evaluation (and ``record.also``, its other sets', in the same transaction);
        the stored record (with its ``rowid``, its ``also`` stored too), or None if this (run,
        step, checkpoint) was already recorded — then the first record stays, its ``recorded``
        count goes up, and an error line says a checkpoint was evaluated twice."""
        for one in (record, *record.also):
            if one.status not in STATUSES:
                raise ValueError(f"status {one.status!r}")
        key = (record.run, record.step, record.checkpoint)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                stored = self._insert(record)
                if stored is not None:
                    stored = dataclasses.replace(stored, also=tuple(
                        one for one in map(self._insert, record.also) if one is not None))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            if stored is not None:
                return stored
            where = "WHERE run=? AND step=? AND checkpoint=? AND eval_set=?"
            keyed = (*key, record.eval_set)
            self._db.execute(f"UPDATE evaluations SET recorded = recorded + 1 {where}", keyed)
            times = self._db.execute(f"SELECT recorded FROM evaluations {where}", keyed).fetchone()[0]
        log.error("%s (step %d, run %r) recorded %d times: it was evaluated again, which the evaluator "
                  "should never do (a bug: please report it); the first record is kept",
                  record.checkpoint, record.step, record.run, times)
        return None

    def _insert(self, record: Record) -> Record | None:
        """One row (inside ``add``'s transaction); None when its key is taken."""
        key = (record.run, record.step, record.checkpoint)
        intervals = json.dumps({"bounds": record.intervals, "bootstrap": record.bootstrap}) \
            if record.intervals else None
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO evaluations VALUES (?,?,?,?,?,?,?,?,?,?,?,?,1,?,?,?,?)",
            (*key, record.checkpoint_mtime, record.evaluated_at,
             record.eval_seconds, record.num_examples, json.dumps(record.metrics),
             json.dumps(record.samples), record.status, record.reason, record.scoring,
             record.train_seconds, intervals, record.eval_set,
             json.dumps(record.costs) if record.costs else None),
        )
        if cursor.rowcount != 1:
            return None
        if record.image_stats:
            self._db.execute("INSERT OR REPLACE INTO image_stats VALUES (?,?,?,?,?)",
                             (*key, record.eval_set, record.image_stats))
        return dataclasses.replace(record, rowid=cursor.lastrowid, image_stats=b"", also=())

    def image_stats(self, record: Record) -> bytes | None:
        """The per-image statistics stored with ``record`` (None: recorded before they were kept,
        or not a successful evaluation)."""
        return self.image_stats_at(record.run, record.step, record.checkpoint, record.eval_set)

    def image_stats_at(self, run: str | None, step: int, checkpoint: str,
                       eval_set: str = DEFAULT_SET) -> bytes | None:
        """``image_stats`` of the evaluation of ``checkpoint`` at ``step`` on ``eval_set`` — of
        ``run``, or when None (an export recorded before it named its run) the newest such
        evaluation of any run."""
        where, args = "step=? AND checkpoint=? AND eval_set=?", (step, checkpoint, eval_set)
        if run is not None:
            where, args = f"run=? AND {where}", (run, *args)
        with self._lock:
            row = self._db.execute(f"SELECT stats FROM image_stats WHERE {where} ORDER BY rowid DESC LIMIT 1",
                                   args).fetchone()
        return bytes(row[0]) if row else None

    def at_step(self, run: str, step: int, eval_set: str = DEFAULT_SET) -> list[Record]:
        """The run's records of ``step`` (more than one only if two checkpoints shared a step)."""
        return self._select("WHERE step = ?", (step,), order="evaluated_at DESC", run=run, eval_set=eval_set)

    def has(self, run: str, step: int, checkpoint: str) -> bool:
        """Whether the checkpoint is recorded (its default set's row: see the module)."""
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM evaluations WHERE run=? AND step=? AND checkpoint=? AND eval_set=?",
                (run, step, checkpoint, DEFAULT_SET)).fetchone()
        return row is not None

    def _select(self, where: str = "", args: tuple = (), order: str = "step, checkpoint",
                limit: int | None = None, offset: int = 0, run: str = ALL_RUNS,
                eval_set: str = DEFAULT_SET) -> list[Record]:
        if run != ALL_RUNS:
            where = f"{where} AND run = ?" if where else "WHERE run = ?"
            args = (*args, run)
        if eval_set != ALL_SETS:
            where = f"{where} AND eval_set = ?" if where else "WHERE eval_set = ?"
            args = (*args, eval_set)
        sql = f"SELECT rowid, * FROM evaluations {where} ORDER BY {order}"
        if limit is not None:
            sql += f" LIMIT {int(limit)} OFFSET {int(offset)}"
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [record_from_row(row) for row in rows]

    def max_rowid(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COALESCE(MAX(rowid), 0) FROM evaluations").fetchone()[0])

    def arrived_after(self, rowid: int, limit: int | None = None) -> list[Record]:
        """Records (of every set) added after the one with ``rowid``, in arrival order (the first
        ``limit``)."""
        return self._select("WHERE rowid > ?", (rowid,), order="rowid", limit=limit, eval_set=ALL_SETS)

    def count_after(self, rowid: int) -> int:
        """How many records (of every set) were added after the one with ``rowid``."""
        with self._lock:
            row = self._db.execute("SELECT COUNT(*) FROM evaluations WHERE rowid > ?", (rowid,)).fetchone()
        return int(row[0])

    def latest(self, run: str = ALL_RUNS, eval_set: str = DEFAULT_SET) -> Record | None:
        order = "step DESC, evaluated_at DESC" if run != ALL_RUNS else "rowid DESC"
        found = self._select(order=order, limit=1, run=run, eval_set=eval_set)
        return found[0] if found else None

    def after(self, step: int, run: str = ALL_RUNS, eval_set: str = DEFAULT_SET) -> list[Record]:
        """Records with a step greater than ``step``, in step order."""
        return self._select("WHERE step > ?", (step,), run=run, eval_set=eval_set)

    def replay(self, step: int, max_rowid: int, run: str = ALL_RUNS, page: int = 100,
               eval_set: str = DEFAULT_SET) -> Iterator[Record]:
        """``after(step, run)``'s records arrived by ``max_rowid``, read ``page`` at a time (by step,
        then arrival): a Watch replay holds one page, not its own copy of the history — a client that stops
        reading stalls its stream with at most a page behind it, however long the history."""
        last_step, last_rowid = step, max_rowid  # rowid > max_rowid matches nothing: step > step only
        while True:
            rows = self._select("WHERE (step > ? OR (step = ? AND rowid > ?)) AND rowid <= ?",
                                (last_step, last_step, last_rowid, max_rowid), order="step, rowid",
                                limit=page, run=run, eval_set=eval_set)
            yield from rows
            if len(rows) < page:
                return
            last_step, last_rowid = rows[-1].step, rows[-1].rowid

    def page(self, from_step: int, offset: int, limit: int, run: str = ALL_RUNS,
             eval_set: str = DEFAULT_SET) -> list[Record]:
        """``limit`` records from ``offset`` among those with step ≥ ``from_step``."""
        order = "step, checkpoint, eval_set" if run != ALL_RUNS else "rowid"
        return self._select("WHERE step >= ?", (from_step,), order=order, limit=limit, offset=offset, run=run,
                            eval_set=eval_set)

    def best(self, metric: str, maximize: bool, run: str = ALL_RUNS,
             eval_set: str = DEFAULT_SET) -> Record | None:
        order = "DESC" if maximize else "ASC"
        where, args = "AND eval_set = ? ", (eval_set,)
        if run != ALL_RUNS:
            where, args = f"{where}AND run = ? ", (*args, run)
        with self._lock:
            row = self._db.execute(
                "SELECT rowid, * FROM evaluations WHERE status='ok' AND json_extract(metrics, ?) IS NOT NULL "
                f"{where}ORDER BY json_extract(metrics, ?) {order}, step DESC LIMIT 1",
                (f'$."{metric}"', *args, f'$."{metric}"'),
            ).fetchone()
        return record_from_row(row) if row else None

    def first_reaching(self, metric: str, target: float, maximize: bool, run: str,
                       eval_set: str = DEFAULT_SET) -> Record | None:
        """The run's first successful evaluation (by step) whose ``metric`` reached ``target``
        (at or above it; at or below when lower is better)."""
        compare = ">=" if maximize else "<="
        with self._lock:
            row = self._db.execute(
                "SELECT rowid, * FROM evaluations WHERE status='ok' AND run = ? AND eval_set = ? "
                f"AND json_extract(metrics, ?) {compare} ? ORDER BY step LIMIT 1",
                (run, eval_set, f'$."{metric}"', target),
            ).fetchone()
        return record_from_row(row) if row else None

    def run_summaries(self) -> list[tuple[str, int, int]]:
        """(run, evaluations, newest step) of every run recorded, the newest run first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT run, COUNT(*), MAX(step) FROM evaluations WHERE eval_set = ? GROUP BY run "
                "ORDER BY MAX(rowid) DESC", (DEFAULT_SET,)).fetchall()
        return [(run, int(count), int(step)) for run, count, step in rows]

    def runs(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(DISTINCT run) FROM evaluations").fetchone()[0])

    def metric_names(self) -> set[str]:
        names: set[str] = set()
        for record in self._select("WHERE status='ok'", eval_set=ALL_SETS):
            names.update(record.metrics)
        return names

    def counts(self) -> tuple[int, int]:
        """(all evaluations, failed or skipped ones)."""
        with self._lock:
            total, bad = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(status != 'ok'), 0) FROM evaluations WHERE eval_set = ?",
                (DEFAULT_SET,)).fetchone()
        return int(total), int(bad)
