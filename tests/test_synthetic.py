"""The synthetic builder: deterministic, and every caption is true of its image."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from captioning import synthetic
from captioning.config import SyntheticConfig
from captioning.errors import DataError
from captioning.manifest import load_dataset
from captioning.records import parse_example, shard_files

SMALL = SyntheticConfig(train_images=30, val_images=6, image_size=75, seed=11, train_shards=3)


def _digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_same_seed_same_bytes_other_seed_differs(tmp_path: Path):
    synthetic.build(tmp_path / "a", SMALL)
    synthetic.build(tmp_path / "b", SMALL)
    synthetic.build(tmp_path / "c", SyntheticConfig(**{**SMALL.__dict__, "seed": 12}))
    a, b, c = _digest(tmp_path / "a"), _digest(tmp_path / "b"), _digest(tmp_path / "c")
    assert a == b
    assert a["train-00000-of-00003"] != c["train-00000-of-00003"]


def test_manifest_counts_match_shards(tmp_path: Path):
    manifest = synthetic.build(tmp_path / "d", SMALL)
    loaded, vocab = load_dataset(tmp_path / "d")
    assert loaded == manifest
    assert manifest.vocab_size == len(vocab)
    for split in ("train", "val"):
        files = shard_files(tmp_path / "d", split)
        records = sum(1 for f in files for _ in tf.data.TFRecordDataset(f))
        assert records == manifest.splits[split].records
        assert len(files) == manifest.splits[split].shards
    assert manifest.splits["train"].images == SMALL.train_images
    assert json.loads((tmp_path / "d" / "dataset.json").read_text())["builder"] == "synthetic"


def _colour_name(rgb: np.ndarray) -> str:
    return min(synthetic.COLOURS, key=lambda n: np.abs(np.array(synthetic.COLOURS[n]) - rgb).sum())


def test_parsed_records_match_the_scene_they_came_from(tmp_path: Path):
    """Decode stored images and check the pixels against the regenerated scene and captions."""
    out = tmp_path / "e"
    synthetic.build(out, SMALL)
    _, vocab = load_dataset(out)
    seen = 0
    for path in shard_files(out, "train") + shard_files(out, "val"):
        for serialized in tf.data.TFRecordDataset(path):
            record = parse_example(serialized)
            image_id = int(record["image_id"])
            split = "val" if image_id >= 10_000_000 else "train"
            scene = synthetic.make_scene(SMALL.seed, split, image_id % 10_000_000, SMALL.image_size)
            caption = vocab.decode(record["caption"].numpy())
            assert caption in synthetic.captions(scene)
            image = tf.io.decode_png(record["image_data"]).numpy()
            assert image.shape == (75, 75, 3)
            for shape in scene.shapes:
                # the named colour is what is drawn at the shape's centre
                centre = image[int(shape.cy), int(shape.cx)]
                assert _colour_name(centre) == shape.colour
                # the named size matches the drawn area
                mask = synthetic.shape_mask(shape, SMALL.image_size)
                assert (mask.sum() > 200) == (shape.size == "large"), (shape, mask.sum())
            xs = [s.cx for s in scene.shapes]
            ys = [s.cy for s in scene.shapes]
            words = caption.split()
            if "left" in words or scene.layout == "row":
                assert xs == sorted(xs)  # reading order is left to right
            if "above" in words or "below" in words:
                assert ys == sorted(ys) and ys[1] - ys[0] > abs(xs[1] - xs[0])
            if "left" in words or "right" in words:
                assert xs[-1] - xs[0] > abs(ys[-1] - ys[0])
            seen += 1
    assert seen > SMALL.train_images  # several captions per image


def test_captions_name_every_shape_and_differ_between_scenes():
    scenes = [synthetic.make_scene(0, "train", i, 75) for i in range(200)]
    for scene in scenes:
        for caption in synthetic.captions(scene):
            for shape in scene.shapes:
                assert f"{shape.colour} {shape.kind}" in caption
    distinct = {synthetic.captions(s)[0] for s in scenes}
    assert len(distinct) > 150  # the image matters: captions are not a handful of constants
    assert {s.layout for s in scenes} == set(synthetic.LAYOUTS)


def test_rebuild_same_is_noop_different_is_refused(tmp_path: Path):
    synthetic.build(tmp_path / "f", SMALL)
    before = _digest(tmp_path / "f")
    synthetic.build(tmp_path / "f", SMALL)
    assert _digest(tmp_path / "f") == before
    with pytest.raises(DataError, match="already holds a different dataset"):
        synthetic.build(tmp_path / "f", SyntheticConfig(**{**SMALL.__dict__, "seed": 99}))
    assert _digest(tmp_path / "f") == before
