"""Towers average: one ``mirrored`` step over 2 and 4 logical CPUs with global batch G updates
every variable exactly as one ``one_device`` step on the same G examples — with and without the
global-norm clip (which must see the all-reduced gradient, not each tower's).

Plain SGD (the update is proportional to the gradient: Adam's first step is ≈ lr·sign(g) and would
hide a sum-instead-of-mean), no dropout, augmentation off, deterministic input order, encoder
frozen and read from the feature cache, as phase 1 runs (the first process builds it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import run_showtell

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("towers")]  # one worker: they share `single`

GLOBAL_BATCH = 8
COMMON = ["--embedding-size", "32", "--lstm-units", "32", "--optimizer", "sgd", "--steps", "1",
          "--save-every-secs", "0", "--lstm-dropout", "0", "--image-dropout", "0", "--augment", "false",
          "--deterministic-input", "--train-inception", "false"]


def one_step(data: Path, model_dir: Path, replicas: int, lr: float, clip: float) -> dict[str, np.ndarray]:
    placement = ["--strategy", "one_device"] if replicas == 1 else \
        ["--strategy", "mirrored", "--logical-cpus", str(replicas)]
    result = run_showtell("train", "--data", str(data), "--model-dir", str(model_dir), *COMMON, *placement,
                          "--batch-size", str(GLOBAL_BATCH // replicas), "--learning-rate", str(lr),
                          "--clip-gradients", str(clip))
    assert result.returncode == 0, result.stderr[-3000:]
    if replicas > 1:
        expected = f"global batch {GLOBAL_BATCH} = {GLOBAL_BATCH // replicas} per replica × {replicas}"
        assert expected in result.stderr
    checkpoint = str(model_dir / "ckpt-1")
    return {name: tf.train.load_variable(checkpoint, name) for name, _ in tf.train.list_variables(checkpoint)
            if name.startswith("model/") and "OPTIMIZER_SLOT" not in name}


def max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


@pytest.fixture(scope="module")
def single(tiny_data: Path, tmp_path_factory) -> dict[str, np.ndarray]:
    """One one_device step, lr 0.5, no clip: the reference both tests compare with."""
    return one_step(tiny_data, tmp_path_factory.mktemp("towers") / "one", 1, lr=0.5, clip=0)


def test_mirrored_towers_average_gradients(tiny_data: Path, tmp_path: Path, single: dict):
    doubled_lr = one_step(tiny_data, tmp_path / "one-2x", 1, lr=1.0, clip=0)  # = towers that *sum* 2
    towers2 = one_step(tiny_data, tmp_path / "mirrored2", 2, lr=0.5, clip=0)
    towers4 = one_step(tiny_data, tmp_path / "mirrored4", 4, lr=0.5, clip=0)
    assert max_difference(towers2, single) < 1e-5
    assert max_difference(towers4, single) < 1e-5
    assert max_difference(doubled_lr, single) > 1e-2, "the step is too small to tell a sum from a mean"


def test_clipping_sees_the_global_gradient(tiny_data: Path, tmp_path: Path, single: dict):
    clipped = one_step(tiny_data, tmp_path / "one", 1, lr=0.5, clip=0.05)
    unclipped = single
    towers = one_step(tiny_data, tmp_path / "mirrored2", 2, lr=0.5, clip=0.05)
    assert max_difference(clipped, unclipped) > 1e-2, "the clip was not active"
    assert max_difference(towers, clipped) < 1e-5
