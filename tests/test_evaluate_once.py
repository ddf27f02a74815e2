"""``showtell evaluate --once``: restore a real checkpoint and report validation metrics."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from tests.helpers import error_lines, run_showtell

pytestmark = pytest.mark.e2e


def test_once_json_reports_loss_perplexity_and_captions(tiny_data: Path, tiny_model: Path):
    result = run_showtell("evaluate", "--once", "--json", "--model-dir", str(tiny_model),
                          "--data", str(tiny_data), "--beam-size", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["step"] == 4 and report["checkpoint"].endswith("ckpt-4")
    metrics = report["metrics"]
    assert math.isclose(metrics["perplexity"], math.exp(metrics["loss"]), rel_tol=1e-6)
    assert 0 < metrics["loss"] < 10 and 0.0 <= metrics["exact_match"] <= 1.0
    manifest = json.loads((tiny_data / "dataset.json").read_text())
    assert report["examples"] == manifest["splits"]["val"]["captions"]
    assert report["samples"] and all(len(s["references"]) >= 3 for s in report["samples"])
    head, _, scorers = report["scoring"].partition(" scorers=")
    assert head == "tokenizer=ptb" and {"bleu4", "cider", "meteor", "rouge_l"} <= set(scorers.split(","))


def test_ptb_without_java_is_one_line(tiny_data: Path, tiny_model: Path, tmp_path: Path, showtell_main,
                                      monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no java on it
    result = showtell_main("evaluate", "--once", "--model-dir", str(tiny_model), "--data", str(tiny_data),
                           "--tokenizer", "ptb")
    assert result.returncode == 1
    assert error_lines(result.stderr) == [
        "showtell evaluate: error: --tokenizer ptb needs Java (`java` on PATH): install a JRE (Debian: "
        "default-jre-headless) or use --tokenizer regex"]


def test_once_without_checkpoint_is_one_clear_line(tiny_data: Path, tmp_path: Path, showtell_main):
    (tmp_path / "empty").mkdir()
    result = showtell_main("evaluate", "--once", "--model-dir", str(tmp_path / "empty"),
                          "--data", str(tiny_data))
    lines = error_lines(result.stderr)
    assert result.returncode == 1 and len(lines) == 1
    assert re.search(r"empty: no checkpoint yet", lines[0])
