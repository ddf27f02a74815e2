"""``--log-format json``: a real trainer's stderr is one JSON object a line — time, level, logger,
message, and the run and step where known — its one-line error included; text stays the default."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from showtell.common.model_dir import ModelDir
from tests.helpers import TINY_MODEL, run_showtell


def _records(stderr: str) -> list[dict]:
    lines = [line for line in stderr.splitlines() if line.strip()]
    bad = [line for line in lines if not line.startswith("{")]
    assert not bad, bad[:5]
    records = [json.loads(line) for line in lines]  # every line: one JSON object
    for record in records:
        assert {"time", "level", "logger", "message"} <= set(record), record
        assert datetime.fromisoformat(record["time"].replace("Z", "+00:00")).tzinfo is not None
    return records


@pytest.mark.e2e
def test_a_real_runs_stderr_is_json_lines(tiny_data: Path, tmp_path: Path):
    model_dir = tmp_path / "model"
    result = run_showtell("train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_MODEL,
                          "--steps", "4", "--log-every-steps", "2", "--save-every-secs", "0",
                          "--save-every-steps", "2", "--log-format", "json")
    assert result.returncode == 0, result.stderr[-3000:]
    records = _records(result.stderr)
    run = ModelDir(model_dir).read_run_id()
    logged = [r for r in records if r["message"].startswith("step 2/4")]
    assert logged and logged[0]["step"] == 2 and logged[0]["run"] == run
    saved = [r for r in records if r["message"].startswith("saved checkpoint")]
    assert [r["step"] for r in saved] == [2, 4] and all(r["run"] == run for r in saved)
    assert {r["level"] for r in records} <= {"DEBUG", "INFO", "WARNING", "ERROR"}
    assert any(r["logger"].startswith("showtell.trainer") for r in records)

    failed = run_showtell("train", "--data", str(tmp_path / "nowhere"), "--model-dir", str(tmp_path / "m2"),
                          "--log-format", "json")
    assert failed.returncode == 1
    [error] = [r for r in _records(failed.stderr) if r["level"] == "ERROR"]
    assert error["message"].startswith(f"showtell train: error: {tmp_path / 'nowhere'}: data directory")


def test_text_stays_the_default_and_a_bad_format_is_refused(tmp_path: Path, showtell_main):
    result = showtell_main("train", "--data", "d", "--model-dir", str(tmp_path / "m"), "--log-format", "xml")
    assert result.returncode == 2 and "--log-format: invalid choice: 'xml'" in result.stderr
