"""The phase-1 feature cache through real ``showtell train`` runs (in this process: the cache is
files on disk, no process boundary is under test): built once, reused with zero encoder forward
passes, rebuilt when the image size or the weights change, and training on it follows the same
loss trajectory as training on the images."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from showtell.captioning.config import SyntheticConfig
from showtell.captioning.data import synthetic
from showtell.captioning.data.feature_cache import INFO
from tests import weights_files
from tests.helpers import TINY_MODEL

pytestmark = pytest.mark.slow

DATA = SyntheticConfig(train_images=24, val_images=4, image_size=80, seed=4, train_shards=2)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cache-data") / "synthetic"
    synthetic.build(out, DATA)
    return out


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> list[Path]:
    out = tmp_path_factory.mktemp("cache-weights")
    encoders = {s: weights_files.random_encoder(75, seed=s) for s in (1, 2)}
    return [weights_files.save_keras3(e, out / f"w{s}.weights.h5") for s, e in encoders.items()]


@pytest.fixture
def train(showtell_main):
    def run(data: Path, model_dir: Path, *extra: str) -> str:
        """``showtell train`` with the tiny settings; what it logged."""
        result = showtell_main("train", "--data", str(data), "--model-dir", str(model_dir), *TINY_MODEL,
                               "--save-every-secs", "0", *extra)
        assert result.returncode == 0, result.stderr[-3000:]
        return result.logs

    return run


def forward_passes(logs: str) -> tuple[int, int]:
    """(for the cache, in training steps), as the trainer counted them."""
    found = re.search(r"encoder forward passes this run: (\d+) for the feature cache, (\d+) in training",
                      logs)
    assert found, logs[-2000:]
    return int(found.group(1)), int(found.group(2))


def caches(data: Path) -> list[Path]:
    root = data / "feature-cache"
    if not root.exists():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in directory.iterdir()}


def test_built_once_reused_and_rebuilt_when_the_key_changes(data: Path, weights: list[Path], tmp_path: Path,
                                                            train):
    w1, w2 = (["--inception-weights", str(w)] for w in weights)
    first = train(data, tmp_path / "a", "--steps", "2", *w1)
    assert forward_passes(first) == (DATA.train_images, 0)
    [cache] = caches(data)
    info = json.loads((cache / INFO).read_text())
    assert info["images"] == DATA.train_images and info["forward_passes"] == DATA.train_images
    assert info["key"]["image_size"] == 80 and info["feature_size"] == 2048
    assert sorted(p.name for p in cache.glob("train-*")) == sorted(p.name for p in data.glob("train-*"))
    manifest = json.loads((data / "dataset.json").read_text())
    assert sum(info["records"]) == manifest["splits"]["train"]["images"]  # one record per image
    # …counted here from the shards, not taken from the trainer's own bookkeeping; and a reuse is
    # shown by the files left untouched (``snapshot``), not by the count it logs.
    shards = [str(p) for p in sorted(cache.glob("train-*"))]
    assert sum(1 for _ in tf.data.TFRecordDataset(shards)) == manifest["splits"]["train"]["images"]
    before = snapshot(cache)

    second = train(data, tmp_path / "b", "--steps", "2", *w1)
    assert forward_passes(second) == (0, 0) and "feature cache: reusing" in second
    assert caches(data) == [cache] and snapshot(cache) == before

    smaller = train(data, tmp_path / "c", "--steps", "2", "--image-size", "75", *w1)
    assert forward_passes(smaller) == (DATA.train_images, 0) and len(caches(data)) == 2
    other = train(data, tmp_path / "d", "--steps", "2", *w2)
    assert forward_passes(other) == (DATA.train_images, 0) and len(caches(data)) == 3

    variants = train(data, tmp_path / "e", "--steps", "2", "--cache-variants", "3", *w1)
    assert forward_passes(variants) == (3 * DATA.train_images, 0) and len(caches(data)) == 4
    assert snapshot(cache) == before  # the other caches were left alone


def losses(model_dir: Path) -> dict[int, float]:
    found = {}
    for events in (model_dir / "train").glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(events)):
            for value in event.summary.value:
                if value.tag == "loss":
                    found[event.step] = float(tf.make_ndarray(value.tensor))
    return found


def test_training_on_the_cache_follows_the_image_trajectory(data: Path, weights: list[Path], tmp_path: Path,
                                                            train):
    common = ["--steps", "8", "--log-every-steps", "1", "--augment", "false", "--deterministic-input",
              "--inception-weights", str(weights[0])]
    images = train(data, tmp_path / "images", *common, "--feature-cache", "false")
    assert forward_passes(images) == (0, 8 * 4)  # batch 4, every step through Inception
    cached = train(data, tmp_path / "cached", *common)
    assert forward_passes(cached)[1] == 0
    on_images, on_cache = losses(tmp_path / "images"), losses(tmp_path / "cached")
    steps = sorted(on_images)
    assert steps == list(range(2, 9)) and sorted(on_cache) == steps  # step 1 traces; not timed
    np.testing.assert_allclose([on_cache[s] for s in steps], [on_images[s] for s in steps], rtol=1e-4)

    train(data, tmp_path / "reseeded", *common, "--seed", "9")
    other = losses(tmp_path / "reseeded")
    assert not np.allclose([other[s] for s in steps], [on_images[s] for s in steps], rtol=1e-4), \
        "another example order gives the same losses: the comparison proves nothing"
