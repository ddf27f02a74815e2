"""A resumed run trains at the rate its flags give, not the one its checkpoint holds: Keras keeps
a constant learning rate in a variable that the restore brings back (found when the demo's
phase 2, started with --learning-rate 0.0003, trained at phase 1's 0.001).  Phase 2's rates (the
encoder's optimizer at its own flag, the decoder's at --learning-rate after phase 1's checkpoint)
are checked where phase 2 already runs: ``tests/test_phases.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import TINY_MODEL, learning_rate


@pytest.mark.slow
def test_a_resumed_run_takes_its_learning_rates_from_the_flags(tiny_data: Path, tmp_path: Path,
                                                                showtell_main):
    model_dir = tmp_path / "model"
    common = ["train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_MODEL,
              "--save-every-secs", "0", "--epochs-per-decay", "0"]  # a constant rate: a variable
    result = showtell_main(*common, "--steps", "4")
    assert result.returncode == 0, result.stderr[-3000:]
    assert abs(learning_rate(model_dir / "ckpt-4") - 0.001) < 1e-9  # TINY_MODEL's Adam rate
    result = showtell_main(*common, "--steps", "5", "--learning-rate", "0.0003")
    assert result.returncode == 0, result.stderr[-3000:]
    assert abs(learning_rate(model_dir / "ckpt-5") - 0.0003) < 1e-9
