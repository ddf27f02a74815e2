"""One writer per directory: a second trainer on a model dir a live trainer holds, and a second
evaluator on a work dir a live evaluator holds, are refused in one line naming the holder; the
holder's crash (SIGKILL) releases the lock; a failed start leaves no directory behind."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest

from showtell.common.locks import DirectoryBusy, DirectoryLock
from tests.helpers import (
    TINY_MODEL,
    copy_model,
    error_lines,
    renice_session,
    run_showtell,
    start_evaluator,
    wait_for,
)
from tests.measure import free_ports

pytestmark = pytest.mark.e2e


def _ckpts(model_dir: Path) -> list[str]:
    return sorted(p.name for p in model_dir.iterdir() if p.name.startswith("ckpt-"))


def test_second_trainer_and_second_evaluator_are_refused_by_name(tiny_data: Path, tiny_model: Path,
                                                                 tmp_path: Path, procs, showtell_main):
    model_dir = copy_model(tiny_model, tmp_path / "model")
    log = tmp_path / "first.log"
    first = procs.start("train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_MODEL,
                        "--steps", "1000000", "--save-every-secs", "0", "--save-every-steps", "1000000000",
                        log=log)
    wait_for(lambda: "resumed from" in log.read_text() or first.poll() is not None, 180, "the first trainer")
    assert first.poll() is None, log.read_text()[-3000:]
    renice_session(first.pid, 10)  # from here on it only holds the lock, training open-ended
    before = _ckpts(model_dir)

    second = run_showtell("train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_MODEL,
                          "--steps", "8")
    assert second.returncode == 1
    assert error_lines(second.stderr) == [
        f"showtell train: error: --model-dir {model_dir} is in use by another trainer "
        f"(pid {first.pid} on host {socket.gethostname()}); stop it first, "
        "or give this one another --model-dir"]
    assert _ckpts(model_dir) == before  # the refused one wrote nothing

    os.kill(first.pid, signal.SIGKILL)  # a crash: the kernel drops the lock with the process
    first.wait(timeout=30)
    third = run_showtell("train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_MODEL,
                         "--steps", "6", "--save-every-secs", "0")
    assert third.returncode == 0, third.stderr[-3000:]
    assert "ckpt-6.index" in _ckpts(model_dir)  # resumed and trained on

    work = tmp_path / "eval"
    holder, _ = start_evaluator(procs, model_dir, tiny_data, work, tmp_path / "eval.log",
                                "--max-eval-examples", "2")
    other = run_showtell("evaluate", "--model-dir", str(model_dir), "--data", str(tiny_data),
                         "--work-dir", str(work), "--port", str(free_ports(1)[0]), "--meteor", "false")
    assert other.returncode == 1
    assert error_lines(other.stderr) == [
        f"showtell evaluate: error: --work-dir {work} is in use by another evaluator "
        f"(pid {holder.pid} on host {socket.gethostname()}); stop it first, "
        "or give this one another --work-dir"]
    # --once keeps its features there too: refused the same way (one writer per cache), in process
    once = showtell_main("evaluate", "--once", "--model-dir", str(model_dir), "--data", str(tiny_data),
                         "--work-dir", str(work), "--meteor", "false")
    assert once.returncode == 1 and error_lines(once.stderr)[-1].startswith(
        f"showtell evaluate: error: --work-dir {work} is in use by another evaluator (pid {holder.pid} ")
    assert holder.poll() is None  # the holder serves on


def test_a_failed_start_leaves_no_directory_and_a_lock_is_exclusive(tmp_path: Path):
    target = tmp_path / "new-model"
    with DirectoryLock(directory=target, role="trainer", flag="--model-dir"):
        assert (target / ".showtell-trainer.lock").is_file()
        with pytest.raises(DirectoryBusy, match=f"pid {os.getpid()} on host"):  # another open file: refused
            DirectoryLock(directory=target, role="trainer", flag="--model-dir").acquire()
    assert not target.exists()  # created by the lock, nothing else written: gone with it
    kept = tmp_path / "kept"
    with DirectoryLock(directory=kept, role="trainer", flag="--model-dir"):
        (kept / "ckpt-1.index").write_text("x")
    assert sorted(p.name for p in kept.iterdir()) == [".showtell-trainer.lock", "ckpt-1.index"]


def test_a_url_directory_is_not_locked_and_says_so(tmp_path: Path, caplog):
    """``gs://``-style directories have no POSIX locks: the lock is skipped with a log line, and two
    holders at once are not refused.  Shown here with a ``file://`` URL, the only kind tested."""
    import logging

    url = (tmp_path / "m").as_uri()
    with caplog.at_level(logging.INFO):
        first = DirectoryLock(directory=url, role="trainer", flag="--model-dir").acquire()
        second = DirectoryLock(directory=url, role="trainer", flag="--model-dir").acquire()
    assert "no lock on an object store; run one trainer per directory" in caplog.text
    assert not (tmp_path / "m").exists()  # nothing written through the URL
    first.release()
    second.release()
