"""Full disks (size-limited tmpfs mounts, made by these tests as root and unmounted after).

The model dir's: the save fails in one line naming the directory and the space, its partial files
go, the previous checkpoint stays complete and named by the state file, the evaluator watching
never sees the partial one; with space back, a restarted trainer resumes and the evaluator goes on.
The evaluator's work dir's: nothing is recorded, the status says why, the service stays up, and it
evaluates by itself once space is back, its history intact."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest

from showtell.common.model_dir import ModelDir
from showtell.v1 import metrics_pb2 as pb
from tests import system_packages
from tests.helpers import TINY_MODEL, error_lines, metrics_stub, start_evaluator, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def _root() -> None:
    """Mounting a tmpfs needs root: skipped without it, failed under CI (which runs as root)."""
    system_packages.require(None if os.geteuid() == 0 else "mounting a tmpfs needs root")
MIB = 1 << 20


@contextlib.contextmanager
def _tmpfs(mount: Path, size: str):
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)]).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=True)  # a straggler: detach it anyway


@pytest.fixture
def small_disk(tmp_path: Path):
    with _tmpfs(tmp_path / "small", "300m") as mount:
        yield mount


def _files(model_dir: Path) -> list[str]:
    """The checkpoints' files (the finished marker goes when any run starts, as it should)."""
    return sorted(p.name for p in model_dir.iterdir() if p.name.startswith("ckpt"))


def test_a_full_disk_fails_the_save_in_one_line_and_loses_nothing(tiny_data: Path, tiny_model: Path,
                                                                   small_disk: Path, tmp_path: Path, procs,
                                                                   showtell_main):
    """The trainer runs in this process (its exit code and one line are the command's own); the
    evaluator reading the same dir is the other process."""
    model_dir = small_disk / "model"
    shutil.copytree(tiny_model, model_dir)  # ckpt-2 and ckpt-4, 84 MiB each
    ballast = small_disk / "ballast"  # leaves 40 MiB: less than one checkpoint
    ballast.write_bytes(b"\0" * (shutil.disk_usage(small_disk).free - 40 * MIB))
    state = (model_dir / "checkpoint").read_text()

    evaluator, port = start_evaluator(procs, model_dir, tiny_data, tmp_path / "eval", tmp_path / "eval.log",
                                      "--policy", "all", "--max-eval-examples", "2")
    channel, stub = metrics_stub(port)
    with channel:
        wait_for(lambda: stub.GetStatus(pb.GetStatusRequest(), timeout=10).status.evaluations >= 2, 300,
                 "ckpt-2 and ckpt-4 evaluated")
        before = _files(model_dir)

        full = showtell_main("train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_MODEL,
                             "--steps", "5", "--save-every-secs", "0", "--keep", "10")
        assert full.returncode == 1, full.stderr[-3000:]
        [line] = [x for x in error_lines(full.stderr) if "error" in x]
        assert line.startswith(f"showtell train: error: --model-dir {model_dir}: no space left on its device "
                               "saving ckpt-5 (")
        assert "MB free of 300 MB); ckpt-4 is still the newest complete checkpoint" in line
        assert _files(model_dir) == before  # no ckpt-5 part, no ckpt-5_temp
        assert (model_dir / "checkpoint").read_text() == state

        ballast.unlink()  # space comes back
        again = showtell_main("train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_MODEL,
                              "--steps", "5", "--save-every-secs", "0", "--keep", "10")
        assert again.returncode == 0, again.logs[-3000:]
        assert "at step 4" in again.logs and (model_dir / "ckpt-5.index").is_file()
        wait_for(lambda: stub.GetStatus(pb.GetStatusRequest(), timeout=10).status.evaluations >= 3, 300,
                 "ckpt-5 evaluated")
        status = stub.GetStatus(pb.GetStatusRequest(), timeout=10).status
        listed = stub.ListEvaluations(pb.ListEvaluationsRequest(), timeout=10).evaluations
    assert status.failures == 0  # the evaluator never read a partial checkpoint
    assert [e.global_step for e in listed] == [2, 4, 5]
    os.kill(evaluator.pid, signal.SIGTERM)  # before the unmount
    evaluator.wait(timeout=60)


def test_a_full_work_dir_is_reported_and_recovered_from(tiny_data: Path, tiny_model: Path, tmp_path: Path,
                                                        procs):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with _tmpfs(tmp_path / "work", "4m") as work:  # far less than one pinned checkpoint copy (84 MiB)
        evaluator, port = start_evaluator(procs, tiny_model, tiny_data, work / "eval", tmp_path / "eval.log",
                                          "--policy", "all", "--max-eval-examples", "2")
        channel, stub = metrics_stub(port)
        with channel:
            status = wait_for(lambda: (s := stub.GetStatus(pb.GetStatusRequest(),
                                                         timeout=10).status).last_error
                              and s, 300, "the full work dir reported")
            assert status.last_error.startswith(f"step 2 not evaluated: --work-dir {work / 'eval'} (")
            assert "No space left on device" in status.last_error and status.evaluations == 0
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
            assert health.status == health_pb2.HealthCheckResponse.SERVING and evaluator.poll() is None

            subprocess.run(["mount", "-o", "remount,size=400m", str(work)], check=True)  # space is back
            wait_for(lambda: stub.GetStatus(pb.GetStatusRequest(), timeout=10).status.evaluations >= 2, 300,
                     "ckpt-2 and ckpt-4 evaluated once space is back")
            status = stub.GetStatus(pb.GetStatusRequest(), timeout=10).status
            assert status.last_error == "" and status.failures == 0
        os.kill(evaluator.pid, signal.SIGTERM)
        evaluator.wait(timeout=60)
        history = sqlite3.connect(work / "eval" / "evaluations.sqlite")
        assert history.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        history.close()
        log = (tmp_path / "eval.log").read_text()
        assert log.count("not evaluated: --work-dir") == 1  # one line, not one per retry
        assert "Traceback" not in log


def test_a_full_disk_stops_keeping_features_and_the_evaluation_lands(tiny_data: Path, tiny_model: Path,
                                                                      tmp_path: Path, caplog):
    """In process (files, no process boundary under test): the work dir's disk fills up before
    the first part of features is written; the evaluation lands from the images, with one line,
    and the history beside it keeps what it had.  With space back, they are kept and reused."""
    from showtell.evaluator.records.record import Record
    from showtell.evaluator.records.store import Store
    from showtell.evaluator.scoring.bootstrap import Bootstrap
    from showtell.evaluator.scoring.evaluation import CheckpointEvaluator
    from showtell.evaluator.scoring.features import FeatureStore
    from showtell.evaluator.scoring.scorers import CaptionScorer

    with _tmpfs(tmp_path / "work", "1m") as work:
        history = Store(work / "evaluations.sqlite")
        history.add(Record(1, "/m/ckpt-1", 0.0, 0.0, 1.0, 4, metrics={"loss": 2.0}, run="r"))
        filler = work / "filler"
        with contextlib.suppress(OSError), open(filler, "wb") as f:  # every block taken
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        evaluator = CheckpointEvaluator(ModelDir(tiny_model), tiny_data, bootstrap=Bootstrap(100, 0.95),
                                        features=FeatureStore(work / "features", 2),
                                        scorer=lambda: CaptionScorer(meteor=False, tokenizer="regex"))
        with caplog.at_level("WARNING", logger="showtell.evaluator.scoring.features"):
            full = evaluator.evaluate(str(tiny_model / "ckpt-2"), 2)
        [line] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert "cannot write (No space left on device); this evaluation goes on from the images" in line
        assert full.costs["features"] == "computed" and "No space left" in full.costs["not_kept"]
        assert [p.name for p in (work / "features").rglob("*") if p.is_file()] == []  # no part, no tmp
        assert [r.metrics for r in history.after(-1, run="r")] == [{"loss": 2.0}]
        history.close()
        filler.unlink()  # space is back
        kept, reused = (evaluator.evaluate(str(tiny_model / "ckpt-2"), 2) for _ in range(2))
        assert (kept.costs["features"], reused.costs["features"]) == ("computed", "reused")
        assert full.metrics == kept.metrics == reused.metrics and full.intervals == reused.intervals
        evaluator.close()
        db = sqlite3.connect(work / "evaluations.sqlite")
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        db.close()
