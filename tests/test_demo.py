"""``showtell demo`` (what ``make demo`` runs): both services start, and an interrupt stops both."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.conftest import free_ports, wait_for

pytestmark = pytest.mark.e2e



def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_demo_starts_both_and_sigint_stops_both(tmp_path: Path, procs):
    import re

    log = tmp_path / "demo.log"
    demo = procs.start("demo", "--dir", str(tmp_path / "demo"), "--seconds", "600", "--port",
                       str(free_ports()[0]), log=log)
    pids = wait_for(lambda: re.findall(r"(?:trainer|evaluator) pid (\d+)", log.read_text()), 120,
                    "both services to start")
    children = [int(p) for p in pids]
    trainer_log = tmp_path / "demo" / "trainer.log"
    wait_for(lambda: trainer_log.exists() and "first step" in trainer_log.read_text(), 240,
             "the trainer's first step")
    try:
        demo.send_signal(signal.SIGINT)
        assert demo.wait(timeout=120) == 130
        assert not [pid for pid in children if _alive(pid)]
    finally:
        for pid in children:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert re.search(r"final checkpoint \S+ckpt-\d+ \(step \d+\) after SIGTERM", trainer_log.read_text())
    assert "SIGTERM received: stopping" in (tmp_path / "demo" / "evaluator.log").read_text()
