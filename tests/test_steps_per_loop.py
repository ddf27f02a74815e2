"""``--steps-per-loop N``: N steps inside one traced ``tf.while_loop`` train exactly as N calls
of one step — the same weights after the same steps, checkpoints at the same steps (chunks end
on the save interval), under one device and mirrored towers, with a call of 5 steps seen in each
(the controller's debug line) — and the log says what it can measure (no input-wait figure when
the batches are read inside the graph)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from showtell.common.model_dir import ModelDir
from tests.helpers import run_showtell

pytestmark = pytest.mark.e2e

COMMON = ["--embedding-size", "32", "--lstm-units", "32", "--optimizer", "sgd", "--learning-rate", "0.5",
          "--steps", "7", "--save-every-secs", "0", "--save-every-steps", "6", "--keep", "10",
          "--log-every-steps", "6", "--lstm-dropout", "0", "--image-dropout", "0", "--augment", "false",
          "--deterministic-input", "--train-inception", "false", "--batch-size", "4"]

LOG_LINE = re.compile(r"step (\d+)/7  loss (\S+) .*examples/s(.*)")
CALL = re.compile(r"steps (\d+) → (\d+) in one call of (\d+)")


def train(data: Path, model_dir: Path, *extra: str) -> tuple[dict[str, np.ndarray], str]:
    result = run_showtell("train", "--data", str(data), "--model-dir", str(model_dir), *COMMON, *extra, "-v")
    assert result.returncode == 0, result.stderr[-3000:]
    checkpoint = str(model_dir / "ckpt-7")
    weights = {name: tf.train.load_variable(checkpoint, name)
               for name, _ in tf.train.list_variables(checkpoint) if name.startswith("model/")}
    return weights, result.stderr


def test_n_steps_per_call_train_exactly_as_one_step_per_call(tiny_data: Path, tmp_path: Path):
    one, one_log = train(tiny_data, tmp_path / "one", "--steps-per-loop", "1")
    looped, looped_log = train(tiny_data, tmp_path / "looped", "--steps-per-loop", "5")
    towers, towers_log = train(tiny_data, tmp_path / "towers", "--steps-per-loop", "5", "--strategy",
                               "mirrored", "--logical-cpus", "2", "--batch-size", "2")
    # the calls: one traced step, five steps in one call up to the save and log interval, the last
    for log in (looped_log, towers_log):
        assert [tuple(map(int, c)) for c in CALL.findall(log)] == [(0, 1, 1), (1, 6, 5), (6, 7, 1)]
    assert [tuple(map(int, c)) for c in CALL.findall(one_log)] == [(s, s + 1, 1) for s in range(7)]
    assert one.keys() == looped.keys() == towers.keys()
    assert max(float(np.max(np.abs(one[k] - looped[k]))) for k in one) < 1e-6
    assert max(float(np.max(np.abs(one[k] - towers[k]))) for k in one) < 1e-5
    for run in ("one", "looped", "towers"):
        assert ModelDir(tmp_path / run).checkpoint_steps() == [6, 7], run  # the save interval, then the end
    logged = LOG_LINE.findall(looped_log)
    assert [int(step) for step, *_ in logged] == [6, 7]  # every log interval landed exactly
    assert all(rest.strip() == "" for *_, rest in logged)  # no input-wait figure: nothing measured it
    logged_one = LOG_LINE.findall(one_log)
    assert len(logged_one) == 2 and all("input wait" in rest for *_, rest in logged_one)
    assert [loss for _, loss, _ in logged] == [loss for _, loss, _ in logged_one]  # the same losses
