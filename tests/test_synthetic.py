"""The synthetic builder: deterministic, and every caption is true of its image."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from showtell.captioning.config import SyntheticConfig
from showtell.captioning.data import synthetic
from showtell.captioning.data.dataset import load_dataset, shard_files
from showtell.captioning.data.records import parse_example
from showtell.common.errors import DataError

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
        records = [parse_example(r) for f in files for r in tf.data.TFRecordDataset(f)]
        assert len(records) == manifest.splits[split].images  # one record per image
        assert sum(int(r["captions"].nrows()) for r in records) == manifest.splits[split].captions
        assert len(files) == manifest.splits[split].shards
    assert manifest.splits["train"].images == SMALL.train_images
    assert json.loads((tmp_path / "d" / "dataset.json").read_text())["builder"] == "synthetic"


def _colour_name(rgb: np.ndarray) -> str:
    return min(synthetic.COLOURS, key=lambda n: np.abs(np.array(synthetic.COLOURS[n]) - rgb).sum())


_PHRASE = re.compile(r"\b(?:a|one) (?:(small|large) )?(\w+) (circle|square|triangle)\b")


def _claim_holds(caption: str, shapes: list[synthetic.Shape]) -> bool:
    """Does the caption's spatial claim hold for the shapes, taken in the order it names them?"""
    xs, ys = [s.cx for s in shapes], [s.cy for s in shapes]
    if " left of " in caption:
        return xs[0] < xs[1] and xs[1] - xs[0] > abs(ys[1] - ys[0])
    if " right of " in caption:
        return xs[0] > xs[1] and xs[0] - xs[1] > abs(ys[1] - ys[0])
    if " above " in caption:
        return ys[0] < ys[1] and ys[1] - ys[0] > abs(xs[1] - xs[0])
    if " below " in caption:
        return ys[0] > ys[1] and ys[0] - ys[1] > abs(xs[1] - xs[0])
    if caption.endswith("from left to right"):
        return xs == sorted(xs)
    if caption.endswith("from right to left"):
        return xs == sorted(xs, reverse=True)
    return True  # no spatial claim ("a red circle and a blue square")


def _caption_is_true(caption: str, image: np.ndarray, scene: synthetic.Scene) -> bool:
    """Independently of the builder's caption code: the named shapes are the drawn ones
    (colour at their centres, size by area, kind as named), in an order that makes the
    spatial claim true."""
    named = _PHRASE.findall(caption)
    if len(named) != len(scene.shapes):
        return False
    for order in itertools.permutations(scene.shapes):
        if all((size in ("", s.size)) and colour == s.colour == _colour_name(image[int(s.cy), int(s.cx)])
               and kind == s.kind for (size, colour, kind), s in zip(named, order, strict=True)) \
                and _claim_holds(caption, list(order)):
            return True
    return False


def test_parsed_records_match_the_scene_they_came_from(tmp_path: Path):
    """Decode stored images and check every caption against the pixels and the scene."""
    out = tmp_path / "e"
    synthetic.build(out, SMALL)
    _, vocab = load_dataset(out)
    seen, layouts = 0, set()
    for path in shard_files(out, "train") + shard_files(out, "val"):
        for serialized in tf.data.TFRecordDataset(path):
            record = parse_example(serialized)
            image_id = int(record["image_id"])
            split = "val" if image_id >= 10_000_000 else "train"
            scene = synthetic.make_scene(SMALL.seed, split, image_id % 10_000_000, SMALL.image_size)
            image = tf.io.decode_png(record["image_data"]).numpy()
            assert image.shape == (75, 75, 3)
            captions = [vocab.decode(c) for c in record["captions"].to_list()]
            assert captions == synthetic.captions(scene)
            for caption in captions:
                assert _caption_is_true(caption, image, scene), (caption, scene)
            for shape in scene.shapes:  # the named size matches the drawn area
                mask = synthetic.shape_mask(shape, SMALL.image_size)
                assert (mask.sum() > 200) == (shape.size == "large"), (shape, mask.sum())
            layouts.add(scene.layout)
            seen += 1
    assert seen > SMALL.train_images  # several captions per image
    assert layouts == set(synthetic.LAYOUTS)


def test_a_false_caption_is_caught():
    """The truth check above can fail: a swapped relation or a wrong colour is rejected."""
    scenes = (synthetic.make_scene(0, "train", i, 75) for i in range(200))
    scene = next(s for s in scenes if s.layout == "horizontal" and s.shapes[0].colour != s.shapes[1].colour)
    image = synthetic.draw(scene, 75)
    true = synthetic.captions(scene)[0]
    assert _caption_is_true(true, image, scene)
    relation = " left of " if " left of " in true else " right of "
    opposite = " right of " if relation == " left of " else " left of "
    assert not _caption_is_true(true.replace(relation, opposite), image, scene)
    other = next(c for c in synthetic.COLOURS if c not in {s.colour for s in scene.shapes})
    assert not _caption_is_true(true.replace(scene.shapes[0].colour, other), image, scene)


def test_every_word_but_the_frame_follows_from_the_image():
    """Larger shape first (ties: reading order): the caption's order is visible in the image."""
    for i in range(300):
        scene = synthetic.make_scene(1, "train", i, 75)
        first = _PHRASE.findall(synthetic.captions(scene)[0])
        sizes = [size for size, _, _ in first]
        if scene.layout in ("horizontal", "vertical"):
            assert sizes != ["small", "large"]
        if scene.layout == "row":
            assert (sizes[0], sizes[2]) != ("small", "large")


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


def test_a_dataset_of_the_per_caption_format_is_refused_in_one_line_and_rebuilt_in_place(tmp_path: Path):
    out = tmp_path / "old"
    synthetic.build(out, SMALL)
    manifest = json.loads((out / "dataset.json").read_text())
    manifest["version"] = 1  # as showtell wrote it when a record was one (image, caption) pair
    manifest["splits"] = {k: {"images": v["images"], "records": v["captions"], "shards": v["shards"]}
                          for k, v in manifest["splits"].items()}
    (out / "dataset.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError) as error:
        load_dataset(out)
    assert str(error.value) == (
        f"{out}/dataset.json: dataset format 1 (one record per caption), this showtell reads 2 (one record "
        f"per image); rebuild it with `showtell data synthetic --out {out}` (and the same inputs)")
    synthetic.build(out, SMALL)  # the builder replaces its own older format in place
    assert load_dataset(out)[0].version == 2
