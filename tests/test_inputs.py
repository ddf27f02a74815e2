"""The tf.data reader: padded/masked batches, one image per caption set, clear data errors."""

from __future__ import annotations

import dataclasses
import itertools
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from showtell.captioning.config import InputConfig
from showtell.captioning.data import inputs
from showtell.captioning.data.dataset import load_dataset, shard_files
from showtell.captioning.data.records import ShardedWriter
from showtell.common.errors import DataError


def test_train_batches_are_padded_shifted_and_masked(tiny_data: Path):
    _, vocab = load_dataset(tiny_data)
    ds = inputs.train_dataset(shard_files(tiny_data, "train"), 75, InputConfig(batch_size=4, seed=1))
    lengths_seen = set()
    for batch in itertools.islice(ds, 6):
        image, inp, tgt, mask = (batch[k].numpy() for k in ("image", "input_ids", "target_ids", "mask"))
        assert image.shape == (4, 75, 75, 3) and image.dtype == np.float32
        assert image.min() >= -1.0 and image.max() <= 1.0
        assert inp.shape == tgt.shape == mask.shape
        for row in range(4):
            n = int(mask[row].sum())
            lengths_seen.add(n)
            assert mask[row, :n].all() and not mask[row, n:].any()  # ones, then padding
            assert inp[row, 0] == vocab.start_id
            assert tgt[row, n - 1] == vocab.end_id
            np.testing.assert_array_equal(inp[row, 1:n], tgt[row, : n - 1])  # target = input shifted
            assert (tgt[row, n:] == 0).all() and (inp[row, n:] == 0).all()
        assert mask.shape[1] == max(int(m.sum()) for m in mask)  # dynamic: padded to the longest
    assert len(lengths_seen) > 1


def test_under_xla_captions_are_padded_to_a_few_lengths_and_the_loss_is_the_same(tiny_data: Path):
    """--jit-compile: a batch's captions padded to a multiple of 8 words (XLA compiles once per
    shape); the padding is masked, so the model's loss on it is the unpadded batch's."""
    from showtell.captioning.config import ModelConfig
    from showtell.captioning.model.network import build_model, masked_loss_sum

    files = shard_files(tiny_data, "train")
    config = InputConfig(batch_size=4, seed=1, deterministic=True, augment=False)  # same images too
    dynamic = next(iter(inputs.train_dataset(files, 75, config)))
    padded = next(iter(inputs.train_dataset(files, 75, dataclasses.replace(config, caption_multiple=8))))
    length = dynamic["input_ids"].shape[1]
    assert padded["input_ids"].shape[1] == -(-length // 8) * 8 and padded["input_ids"].shape[1] % 8 == 0
    for key in ("input_ids", "target_ids", "mask"):
        np.testing.assert_array_equal(padded[key][:, :length], dynamic[key])
        assert not padded[key][:, length:].numpy().any()
    np.testing.assert_array_equal(padded["image"], dynamic["image"])

    _, vocab = load_dataset(tiny_data)
    model = build_model(ModelConfig(vocab_size=len(vocab), embedding_size=16, lstm_units=16, image_size=75))

    def loss(batch) -> float:
        logits = model((batch["image"], batch["input_ids"]), training=False)
        total, words = masked_loss_sum(logits, batch["target_ids"], batch["mask"])
        return float(total / words)

    assert loss(padded) == pytest.approx(loss(dynamic), rel=1e-5)


def test_eval_images_yield_each_image_once_with_all_references(tiny_data: Path):
    files = shard_files(tiny_data, "val")
    manifest, vocab = load_dataset(tiny_data)
    ids = [int(i) for b in inputs.eval_images(files, 75, batch_size=3) for i in b["image_id"].numpy()]
    assert len(ids) == len(set(ids)) == manifest.splits["val"].images
    refs = inputs.load_references(files, vocab)
    assert set(refs) == set(ids)
    assert sum(len(r) for r in refs.values()) == manifest.splits["val"].captions
    assert all(len(r) >= 3 for r in refs.values())
    # every caption of every image comes with it, once: the teacher-forcing rows are the references
    rows = []
    for batch in inputs.eval_images(files, 75, batch_size=3):
        pairs = inputs.teacher_forcing(batch["captions"])
        owners = batch["image_id"].numpy()[pairs["owner"].numpy()]
        rows += [(int(owner), vocab.decode(target[: int(mask.sum())]))
                 for owner, target, mask in zip(owners, pairs["target_ids"].numpy(), pairs["mask"].numpy(),
                                                strict=True)]
    assert sorted(rows) == sorted((i, r) for i, refs_ in refs.items() for r in refs_)



def test_a_pass_that_ends_has_no_tuning_thread_for_its_release_to_wait_for(tiny_data: Path, tmp_path: Path):
    """An evaluation's, a cache build's and the references' pipelines run without tf.data's
    autotuning thread (the pretraining's held-out pass too): releasing their iterator joined it,
    asleep up to tens of seconds (``inputs.one_pass``).  The first two still yield every image.
    Training's pipeline, whose iterator lives as long as the run, keeps its tuning."""
    from showtell.captioning.data.feature_cache import FeatureCache

    files = shard_files(tiny_data, "val")
    evaluation = inputs.eval_images(files, 75, batch_size=3)
    views = FeatureCache(tmp_path, {"variants": 2})._views(files, 75, InputConfig(), 4)
    for ds in (evaluation, views, inputs.caption_records(files)):
        assert ds.options().autotune.enabled is False
    images = load_dataset(tiny_data)[0].splits["val"].images
    assert sum(int(b["image_id"].shape[0]) for b in evaluation) == images
    assert sum(int(ids.shape[0]) for ids, _ in views) == images
    training = inputs.train_dataset(shard_files(tiny_data, "train"), 75, InputConfig(batch_size=4))
    assert training.options().autotune.enabled is not False

def test_training_shows_each_caption_once_per_as_many_passes_as_an_image_has_captions(tiny_data: Path):
    """One record per image: each pass shows an image once, with its captions in turn."""
    files = shard_files(tiny_data, "train")
    manifest, vocab = load_dataset(tiny_data)
    refs = inputs.load_references(files, vocab)
    per_image = {len(r) for r in refs.values()}
    assert len(per_image) == 1  # synthetic: the same number of captions for every image
    passes = per_image.pop()
    # one shard at a time: the first passes × images examples are exactly those passes
    config = InputConfig(batch_size=1, seed=0, augment=False, shuffle_buffer=1, deterministic=True,
                         interleave_cycle=1)
    ds = inputs.train_dataset(files, 75, config).take(passes * manifest.splits["train"].images)
    seen = {}
    for batch in ds:
        n = int(batch["mask"].numpy().sum())
        caption = vocab.decode(np.concatenate([[vocab.start_id], batch["target_ids"].numpy()[0, :n]]))
        seen.setdefault(int(batch["image_id"].numpy()[0]), []).append(caption)
    assert {i: sorted(c) for i, c in seen.items()} == {i: sorted(r) for i, r in refs.items()}


def test_truncated_shard_is_named(tiny_data: Path, tmp_path: Path):
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    bad = Path(shard_files(data, "train")[2])
    raw = bad.read_bytes()
    bad.write_bytes(raw[: len(raw) // 2])
    ds = inputs.train_dataset(shard_files(data, "train"), 75, InputConfig(batch_size=4, seed=0))
    with pytest.raises(DataError, match=rf"{bad.name}: corrupt or truncated"):
        for _ in itertools.islice(inputs.checked(ds, shard_files(data, "train")), 200):
            pass


def test_undecodable_image_is_named(tmp_path: Path):
    with ShardedWriter(tmp_path, "val", 1) as writer:
        writer.write_image(tf.io.encode_png(np.zeros((80, 80, 3), np.uint8)).numpy(), 1, [[0, 3, 1]])
        writer.write_image(b"not an image at all", 77, [[0, 3, 1]])
    files = shard_files(tmp_path, "val")
    with pytest.raises(DataError, match=r"val-00000-of-00001: record 1 \(image_id 77\) holds an undecodable"):
        list(inputs.checked(inputs.eval_images(files, 75, batch_size=1), files))


def test_missing_data_dir_is_clear(tmp_path: Path):
    with pytest.raises(DataError, match=r"does not exist; build one with `showtell data synthetic"):
        load_dataset(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"dataset\.json: missing"):
        load_dataset(tmp_path / "empty")
