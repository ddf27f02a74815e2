"""``--mixed-precision bf16|fp16`` and ``--jit-compile``, on the CPU: each trains (its loss falls
and stays near float32's), its checkpoints hold float32 variables that restore into any other
mode, and the evaluator reads them as always.  In process: no process boundary is under test."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from showtell.captioning.config import ModelConfig
from showtell.captioning.model.network import build_model
from showtell.trainer.config import ComputeConfig
from tests.helpers import TINY_SIZES

STEPS = 12
# The tiny model's loss then falls well beyond bf16's noise in 12 steps.  The same batches in the
# same order in every run, whatever the machine's load (tf.data's parallel reads otherwise order
# examples as they finish: a loaded machine gave float32 curves 6 % apart).
FAST = ["--learning-rate", "0.01", "--deterministic-input"]


def _train(showtell_main, data: Path, model_dir: Path, *extra: str, steps: int = STEPS,
           encoder: str = "false") -> list[float]:
    """Train to ``steps``; the per-step losses of this run, from its summaries (the log's stream
    is not capsys's once another test set logging up)."""
    before = _losses(model_dir)
    result = showtell_main("train", "--data", str(data), "--model-dir", str(model_dir), *TINY_SIZES,
                           "--train-inception", encoder, "--steps", str(steps), "--log-every-steps", "1",
                           "--save-every-secs", "0", *FAST, *extra)
    assert result.returncode == 0, result.stderr[-3000:]
    after = _losses(model_dir)
    return [after[s] for s in sorted(after) if s not in before]


def _losses(model_dir: Path) -> dict[int, float]:
    losses: dict[int, float] = {}
    for path in sorted((model_dir / "train").glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag == "loss":
                    losses[event.step] = float(tf.make_ndarray(value.tensor))
    return losses


def _float_dtypes(checkpoint: Path) -> set[str]:
    dtypes = tf.train.load_checkpoint(str(checkpoint)).get_variable_to_dtype_map()
    return {dtype.name for dtype in dtypes.values() if dtype.is_floating}


@pytest.fixture(scope="module")
def float32_losses(tiny_data: Path, tmp_path_factory) -> list[float]:
    from showtell.cli import main

    model_dir = tmp_path_factory.mktemp("f32") / "model"
    assert main(["train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_SIZES,
                 "--train-inception", "false", "--steps", str(STEPS), "--log-every-steps", "1",
                 "--save-every-secs", "0", *FAST]) == 0
    losses = _losses(model_dir)
    return [losses[s] for s in sorted(losses)]


@pytest.mark.slow
@pytest.mark.parametrize("flags", [("--mixed-precision", "bf16"), ("--mixed-precision", "fp16"),
                                   ("--jit-compile", "true")], ids=["bf16", "fp16", "xla"])
def test_each_lever_trains_like_float32_and_writes_float32_checkpoints(
        flags, float32_losses, tiny_data: Path, tmp_path: Path, showtell_main):
    model_dir = tmp_path / "model"
    losses = _train(showtell_main, tiny_data, model_dir, *flags)
    # (the first step's loss is not summarised: that call is graph tracing)
    assert len(losses) == len(float32_losses) >= STEPS - 1 and all(map(math.isfinite, losses)), losses
    assert np.mean(losses[-3:]) < np.mean(losses[:3]), losses  # it learns
    # Same seed, same batches: the curves agree to the precision's few digits.
    reference = np.mean(float32_losses[-3:])
    assert abs(np.mean(losses[-3:]) - reference) < 0.05 * reference, (losses, float32_losses)
    assert _float_dtypes(model_dir / f"ckpt-{STEPS}") == {"float32"}

    # The checkpoint goes on in another mode (float32; bf16 after an XLA run): step and optimizer
    # state come back, and training continues.
    other = ("--mixed-precision", "bf16") if flags[0] == "--jit-compile" else ()
    more = _train(showtell_main, tiny_data, model_dir, *other, steps=STEPS + 2)
    assert len(more) >= 1 and all(math.isfinite(v) for v in more), more


@pytest.mark.slow
def test_fp16_fine_tunes_encoder_and_decoder_under_one_loss_scale(tiny_data: Path, tmp_path: Path,
                                                                  showtell_main):
    """Phase 2: two optimizers, each applying through its own loss scale, from one scaled loss."""
    model_dir = tmp_path / "model"
    losses = _train(showtell_main, tiny_data, model_dir, "--mixed-precision", "fp16", steps=3, encoder="true")
    assert len(losses) >= 2 and all(math.isfinite(v) for v in losses), losses
    checkpoint = str(model_dir / "ckpt-3")
    assert _float_dtypes(model_dir / "ckpt-3") == {"float32"}
    for optimizer in ("optimizer", "encoder_optimizer"):  # updates applied, not all skipped as overflows
        iterations = tf.train.load_variable(checkpoint, f"{optimizer}/_iterations/.ATTRIBUTES/VARIABLE_VALUE")
        assert iterations > 0, optimizer


def test_a_mixed_precision_model_computes_in_its_dtype_and_answers_in_float32():
    config = ModelConfig(vocab_size=20, image_size=75, embedding_size=8, lstm_units=8)
    model = build_model(config, "bf16")
    assert model.lstm.compute_dtype == "bfloat16" and model.encoder.layers[1].compute_dtype == "bfloat16"
    assert all(w.dtype == "float32" for w in model.weights)
    logits = model((tf.zeros([2, 75, 75, 3]), tf.zeros([2, 3], tf.int32)))
    assert logits.dtype == tf.float32  # the softmax and the loss in float32
    assert build_model(config).lstm.compute_dtype == "float32"  # the policy was put back
    assert ComputeConfig().mixed_precision == "off"
