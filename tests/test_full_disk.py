"""The model dir's disk fills up (a size-limited tmpfs, mounted by this test as root and unmounted
after): the save fails in one line naming the directory and the space, its partial files go, the
previous checkpoint stays complete and named by the state file, the evaluator watching never sees
the partial one; with space back, a restarted trainer resumes and the evaluator goes on."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from showtell.v1 import metrics_pb2 as pb
from tests.conftest import TINY_MODEL, error_lines, metrics_stub, run_showtell, start_evaluator, wait_for

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI runs as root)")]
MIB = 1 << 20


@pytest.fixture
def small_disk(tmp_path: Path):
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)]).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=True)  # a straggler: detach it anyway


def _files(model_dir: Path) -> list[str]:
    """The checkpoints' files (the finished marker goes when any run starts, as it should)."""
    return sorted(p.name for p in model_dir.iterdir() if p.name.startswith("ckpt"))


def test_a_full_disk_fails_the_save_in_one_line_and_loses_nothing(tiny_data: Path, tiny_model: Path,
                                                                   small_disk: Path, tmp_path: Path, procs):
    model_dir = small_disk / "model"
    shutil.copytree(tiny_model, model_dir)  # ckpt-2 and ckpt-4, 84 MiB each
    ballast = small_disk / "ballast"  # leaves 40 MiB: less than one checkpoint
    ballast.write_bytes(b"\0" * (shutil.disk_usage(small_disk).free - 40 * MIB))
    state = (model_dir / "checkpoint").read_text()

    evaluator, port = start_evaluator(procs, model_dir, tiny_data, tmp_path / "eval", tmp_path / "eval.log",
                                      "--policy", "all", "--max-eval-examples", "2")
    channel, stub = metrics_stub(port)
    with channel:
        wait_for(lambda: stub.GetStatus(pb.GetStatusRequest(), timeout=10).evaluations >= 2, 300,
                 "ckpt-2 and ckpt-4 evaluated")
        before = _files(model_dir)

        full = run_showtell("train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_MODEL,
                            "--steps", "5", "--save-every-secs", "0", "--keep", "10")
        assert full.returncode == 1, full.stderr[-3000:]
        [line] = [x for x in error_lines(full.stderr) if "error" in x]
        assert line.startswith(f"showtell train: error: --model-dir {model_dir}: no space left on its device "
                               "saving ckpt-5 (")
        assert "MB free of 300 MB); ckpt-4 is still the newest complete checkpoint" in line
        assert _files(model_dir) == before  # no ckpt-5 part, no ckpt-5_temp
        assert (model_dir / "checkpoint").read_text() == state

        ballast.unlink()  # space comes back
        again = run_showtell("train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_MODEL,
                             "--steps", "5", "--save-every-secs", "0", "--keep", "10")
        assert again.returncode == 0, again.stderr[-3000:]
        assert "at step 4" in again.stderr and (model_dir / "ckpt-5.index").is_file()
        wait_for(lambda: stub.GetStatus(pb.GetStatusRequest(), timeout=10).evaluations >= 3, 300,
                 "ckpt-5 evaluated")
        status = stub.GetStatus(pb.GetStatusRequest(), timeout=10)
        listed = stub.ListEvaluations(pb.ListEvaluationsRequest(), timeout=10).evaluations
    assert status.failures == 0  # the evaluator never read a partial checkpoint
    assert [e.global_step for e in listed] == [2, 4, 5]
    os.kill(evaluator.pid, signal.SIGTERM)  # before the unmount
    evaluator.wait(timeout=60)
