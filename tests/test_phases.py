"""Transfer learning as a user runs it: ``showtell train --inception-weights`` (phase 1, frozen),
then ``--train-inception true`` (phase 2) in the same model dir; the evaluator needs only the
checkpoints; bad weights and offline ``imagenet`` fail in one line with nothing written.  The
phases run in process (``showtell_main``): they meet only through the model dir, and the process
boundaries of a resumed run are tests/test_train_cli.py's."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from showtell.captioning.model.network import build_model
from showtell.captioning.model.restoring import read_model_config
from showtell.captioning.weights.encoder import IMAGENET_FILE
from showtell.common import processes
from showtell.common.model_dir import ModelDir
from tests import system_packages, weights_files
from tests.helpers import ROOT, TINY_DATA, TINY_SIZES, error_lines, learning_rate

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("pretrained")
    encoder = weights_files.random_encoder(75, seed=11)
    path = weights_files.save_keras3(encoder, out / "inception.weights.h5")
    return {"path": path, "values": weights_files.values(encoder)}


def restored(checkpoint: Path):
    model = build_model(read_model_config(ModelDir(checkpoint.parent)))
    tf.train.Checkpoint(model=model).restore(str(checkpoint)).expect_partial().assert_existing_objects_matched()
    return model


def numpy(variables) -> list[np.ndarray]:
    return [v.numpy() for v in variables]


def step_of(checkpoint: Path) -> int:
    return int(tf.train.load_variable(str(checkpoint), "step/.ATTRIBUTES/VARIABLE_VALUE"))


def test_frozen_phase_then_fine_tune(tiny_data: Path, pretrained: dict, tmp_path: Path, showtell_main):
    model_dir = tmp_path / "model"
    common = ["train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_SIZES,
              "--save-every-secs", "0", "--save-every-steps", "1", "--keep", "10", "--feature-cache", "false",
              "--epochs-per-decay", "0"]  # constant rates: variables the checkpoint brings back
    phase1 = showtell_main(*common, "--steps", "3", "--inception-weights", str(pretrained["path"]))
    assert phase1.returncode == 0, phase1.logs[-3000:]
    assert "encoder frozen: pretrained encoder, phase 1" in phase1.logs
    assert "376 tensors loaded" in phase1.logs

    first, third = restored(model_dir / "ckpt-1"), restored(model_dir / "ckpt-3")
    for model in (first, third):  # kernels, betas and BN moving statistics: exactly the file's
        for got, want in zip(numpy(model.encoder.weights), pretrained["values"], strict=True):
            np.testing.assert_array_equal(got, want)
    for before, after in zip(numpy(first.decoder_weights), numpy(third.decoder_weights), strict=True):
        assert not np.array_equal(before, after), "a decoder variable did not train"

    record = json.loads((model_dir / "showtell-model.json").read_text())["encoder_init"]
    assert record["sha256"] == hashlib.sha256(pretrained["path"].read_bytes()).hexdigest()
    assert record["kind"] == "keras-weights-h5" and record["tensors"] == 376
    report = (model_dir / "encoder-init.tsv").read_text().splitlines()
    assert len(report) == 1 + 376 and report[1].startswith("layers/conv2d/vars/0\t")

    # Self-contained checkpoints: the evaluator needs neither the weights file nor a flag.  With a
    # --work-dir, it keeps the encoder's features for the checkpoints after it.
    moved = pretrained["path"].rename(tmp_path / "elsewhere.h5")
    try:
        evaluated = showtell_main("evaluate", "--once", "--json", "--meteor", "false", "--model-dir",
                                  str(model_dir), "--data", str(tiny_data), "--work-dir",
                                  str(tmp_path / "eval"), "--checkpoint", str(model_dir / "ckpt-1"))
        assert evaluated.returncode == 0, evaluated.logs[-3000:]
        once = json.loads(evaluated.stdout)
        assert once["step"] == 1 and once["costs"]["features"] == "computed"
        assert once["costs"]["images_computed"] == TINY_DATA.val_images

        # Phase 2 in the same dir: resumes at step 3; the encoder optimizer starts fresh; the
        # decoder's rate is the flag's, not the one phase 1's checkpoint brought back.
        phase2 = showtell_main(*common, "--steps", "5", "--train-inception", "true",
                               "--learning-rate", "0.0002", "--inception-learning-rate", "0.01")
    finally:
        moved.rename(pretrained["path"])
    assert phase2.returncode == 0, phase2.logs[-3000:]
    assert "resumed from" in phase2.logs and "ckpt-3 at step 3" in phase2.logs
    assert "encoder_optimizer is not in" in phase2.logs
    assert "encoder learning rate 0.01 (constant)" in phase2.logs
    assert step_of(model_dir / "ckpt-5") == 5
    assert abs(learning_rate(model_dir / "ckpt-3") - 0.001) < 1e-9  # TINY_SIZES' Adam rate, phase 1
    assert abs(learning_rate(model_dir / "ckpt-5") - 0.0002) < 1e-9
    assert abs(learning_rate(model_dir / "ckpt-5", "encoder_optimizer") - 0.01) < 1e-9
    fifth = restored(model_dir / "ckpt-5")
    changed = {w.path.split("/")[-1]: 0 for w in fifth.encoder.weights}
    for w, want in zip(fifth.encoder.weights, pretrained["values"], strict=True):
        changed[w.path.split("/")[-1]] += not np.array_equal(w.numpy(), want)
    assert changed["kernel"] == 94 and changed["beta"] == 94, changed
    assert changed["moving_mean"] == 94 and changed["moving_variance"] == 94, changed

    # A phase-2 restart: its encoder optimizer state is restored, not started over, and weights
    # passed again are not applied over the trained encoder.  At --steps 5, already reached: it
    # restores, says so and ends (the restore is what is under test; training on after a resume is
    # tests/test_train_cli.py's, and tracing Inception's gradient again cost 18 CPU-s here).
    again = showtell_main(*common, "--steps", "5", "--train-inception", "true",
                          "--inception-weights", str(pretrained["path"]))
    assert again.returncode == 0, again.logs[-3000:]
    assert "resumed from" in again.logs and "ckpt-5 at step 5" in again.logs
    assert "encoder_optimizer is not in" not in again.logs
    not_applied = f"{pretrained['path']} not applied: the model dir's own checkpoint carries the encoder"
    assert not_applied in again.logs
    assert "done: step 5 → 5" in again.logs
    _features_reused_only_for_the_same_encoder(model_dir, tiny_data, tmp_path / "eval",
                                               once["costs"]["encoder"])


def _features_reused_only_for_the_same_encoder(model_dir: Path, data: Path, work: Path, first: str) -> None:
    """The evaluator's feature reuse on the phases' real checkpoints, against evaluations from the
    images: ckpt-3 shares ckpt-1's frozen encoder (its features, kept by ``evaluate --once`` above,
    are read back — a new evaluator reuses what an earlier one wrote), ckpt-5's was fine-tuned
    (computed anew), and a copy of ckpt-3 whose encoder differs in its last variable alone (a BN
    statistic) is computed anew too.  The encoder's passes are counted where it is called.  Every
    metric and interval equals the from-images evaluation's to 1e-6 (relative; the features are
    float32 both ways, read back bit for bit)."""
    from showtell.evaluator.scoring.bootstrap import Bootstrap
    from showtell.evaluator.scoring.evaluation import CheckpointEvaluator
    from showtell.evaluator.scoring.features import FeatureStore
    from showtell.evaluator.scoring.scorers import CaptionScorer

    # One evaluator, traced once: with the store it keeps and reuses features, without it (None)
    # it computes them as before; the encoder's passes are counted where it is called.
    evaluator = CheckpointEvaluator(ModelDir(model_dir), data, bootstrap=Bootstrap(200, 0.95),
                                    scorer=lambda: CaptionScorer(meteor=False, tokenizer="regex"))
    evaluator._prepare()
    passes, encode = [], evaluator.sets[0].validator._encode

    def counted(images):
        passes.append(int(images.shape[0]))
        return encode(images)

    evaluator.sets[0].validator._encode = counted
    store = FeatureStore(work / "features", 2)

    def evaluate(path: str, step: int, kept: bool):
        evaluator.features = store if kept else None
        before = sum(passes)
        return evaluator.evaluate(path, step), sum(passes) - before

    changed = restored(model_dir / "ckpt-3")
    last = changed.encoder_weights[-1]
    last.assign(last * 1.5 + 0.1)
    copy = Path(tf.train.Checkpoint(model=changed).save(str(model_dir / "changed")))  # changed-1
    images, encoders = TINY_DATA.val_images, []
    for checkpoint, step, how in (("ckpt-3", 3, "reused"), ("ckpt-5", 5, "computed"),
                                  (copy.name, 30, "computed")):
        path = str(model_dir / checkpoint)
        (kept, kept_passes), (fresh, fresh_passes) = evaluate(path, step, True), evaluate(path, step, False)
        encoders.append(kept.costs["encoder"])
        assert kept.costs["features"] == how, (checkpoint, kept.costs)
        assert kept_passes == (0 if how == "reused" else images) and fresh_passes == images, checkpoint
        assert kept.costs["images_reused"] == (images if how == "reused" else 0)
        assert fresh.costs["features"] == "off" and fresh.costs["images_computed"] == images
        assert kept.metrics.keys() == fresh.metrics.keys() and kept.intervals.keys() == fresh.intervals.keys()
        for name, value in fresh.metrics.items():
            assert kept.metrics[name] == pytest.approx(value, rel=1e-6, abs=1e-9), (checkpoint, name)
            assert kept.intervals.get(name) == pytest.approx(fresh.intervals.get(name), rel=1e-6, abs=1e-9)
        assert kept.samples == fresh.samples
    assert encoders[0] == first and len(set(encoders)) == 3  # ckpt-1's encoder is ckpt-3's; the others differ
    # --feature-cache-keep 2: the two most recently used encoders' features stay
    assert len([p for p in (work / "features").iterdir() if not p.name.startswith(".")]) == 2
    evaluator.close()


def _untouched(model_dir: Path) -> bool:
    return not model_dir.exists() or not any(model_dir.iterdir())


def test_bad_weights_file_is_one_line_and_writes_nothing(tiny_data: Path, pretrained: dict,
                                                         tmp_path: Path, showtell_main):
    import h5py

    bad = tmp_path / "bad.weights.h5"
    bad.write_bytes(pretrained["path"].read_bytes())
    with h5py.File(bad, "a") as f:
        del f["layers/conv2d_17/vars/0"]
    model_dir = tmp_path / "model"
    result = showtell_main("train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_SIZES,
                           "--steps", "2", "--inception-weights", str(bad))
    lines = error_lines(result.stderr)
    assert result.returncode == 1, result.stderr[-2000:]
    assert lines[-1].startswith("showtell train: error: --inception-weights ")
    assert "bad.weights.h5" in lines[-1]
    assert "tensor layers/conv2d_17/vars/0 is missing (expected shape [" in lines[-1]
    assert "Traceback" not in result.stderr and _untouched(model_dir)


def test_imagenet_offline_fails_fast_with_what_to_do(tiny_data: Path, tmp_path: Path):
    import subprocess

    env = {**processes.environment(), "KERAS_HOME": str(tmp_path / "keras")}  # no cached download
    model_dir = tmp_path / "model"
    started = time.monotonic()
    result = subprocess.run(
        processes.command("train", "--data", str(tiny_data), "--model-dir", str(model_dir), *TINY_SIZES,
                     "--steps", "2", "--inception-weights", "imagenet"),
        capture_output=True, text=True, timeout=240, env=env, cwd=ROOT,
    )
    elapsed = time.monotonic() - started
    # a machine that reaches storage.googleapis.com cannot show the offline failure: skipped there,
    # failed under CI (whose machines have no internet but the package registries)
    system_packages.require("this machine reached storage.googleapis.com: the download worked"
                            if result.returncode == 0 else None)
    error = error_lines(result.stderr)[-1]
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert error.startswith("showtell train: error: --inception-weights imagenet: cannot download ")
    assert f"pass --inception-weights /path/to/{IMAGENET_FILE}" in error
    assert elapsed < 90, f"took {elapsed:.0f} s"  # DNS failure here is immediate; connect timeout is 30 s
    assert _untouched(model_dir)
    assert not os.path.exists(tmp_path / "keras" / "models" / IMAGENET_FILE)  # no half download left
