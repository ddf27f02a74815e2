"""A short chaos soak (``bench/chaos.py``): a trainer and an evaluator killed (SIGKILL or SIGTERM,
during a save, during an evaluation, or at random) and restarted — no invariant violated."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.e2e


def test_short_chaos_soak_violates_nothing(tmp_path: Path):
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "chaos.py"), "--seconds", "120",
                             "--kills", "4", "--seed", "3", "--dir", str(tmp_path / "soak")],
                            capture_output=True, text=True, timeout=900, cwd=ROOT)
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["violations"] == [], figures
    assert result.returncode == 0, result.stderr[-3000:]
    assert figures["kills"] == 4 and figures["evaluated"] >= 3
    trainer_kills = sum(n for what, n in figures["kills_by"].items() if what.startswith("trainer"))
    assert figures["trainer_resumes_checked"] + figures["trainer_killed_before_restoring"] == trainer_kills
