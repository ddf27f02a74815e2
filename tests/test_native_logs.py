"""A failing TensorFlow command's stderr is its one-line error: TensorFlow's native start-up
notices (absl's banner; the CPU features it was not built for, or oneDNN's "custom operations
are on" where the CPU has AVX-512 — which notices depends on the machine) are hidden unless ``-v``."""

from __future__ import annotations

import os
import subprocess

from showtell.common import processes
from tests.helpers import ROOT

ERROR = ("showtell train: error: /nonexistent: data directory does not exist; build one with "
         "`showtell data synthetic --out /nonexistent`")


def _train_stderr(*extra: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CPP", "ABSL"))}
    result = subprocess.run(processes.command("train", *extra, "--data", "/nonexistent", "--model-dir",
                                              "/tmp/showtell-never-made"),
                            capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert result.returncode == 1
    return result.stderr


def test_showtell_runs_is_quiet_too():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CPP", "ABSL"))}
    result = subprocess.run(processes.command("runs", "/nonexistent"), capture_output=True, text=True,
                            timeout=120, cwd=ROOT, env=env)
    assert (result.returncode, result.stderr) == \
        (1, "showtell runs: error: /nonexistent: no such model dir\n")


def test_a_failing_command_prints_one_line_and_with_v_the_notices_too():
    assert _train_stderr() == ERROR + "\n"
    verbose = _train_stderr("-v")
    # the notices exist on this machine, so the check above can fail
    assert "WARNING: All log messages before absl::InitializeLog() is called" in verbose, verbose
    assert "oneDNN custom operations are on" in verbose or "cpu_feature_guard" in verbose, verbose
    assert verbose.rstrip().endswith(ERROR)
