"""The TFRecord schema and sharded writing/reading of it.

One ``tf.train.Example`` per image, every caption of the image in it — the feature cache's
format with the image's bytes in place of its features: ``image/data`` (encoded JPEG/PNG),
``image/image_id``, ``captions/ids`` (every caption's word ids, ``<S>`` … ``</S>``, one after
another) and ``captions/lengths``.  im2txt wrote one record per (image, caption) pair, i.e. every
JPEG five times on COCO (≈95 GB of shards for 19 GB of images); one record per image writes it
once, and evaluation reads each image's references straight from its record.

Shards are written under a temporary name and renamed when complete, so a crashed build
never leaves a shard that looks finished.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import tensorflow as tf

from showtell.common.errors import first_line

log = logging.getLogger(__name__)

IMAGE_DATA = "image/data"
IMAGE_ID = "image/image_id"
CAPTION_IDS = "captions/ids"
CAPTION_LENGTHS = "captions/lengths"


def int64_feature(values: Sequence[int]) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def caption_features(captions: Sequence[Sequence[int]]) -> dict[str, tf.train.Feature]:
    """Every caption of an image, flattened with their lengths (shared with the feature cache)."""
    return {CAPTION_IDS: int64_feature([int(i) for c in captions for i in c]),
            CAPTION_LENGTHS: int64_feature([len(c) for c in captions])}


def make_example(image_bytes: bytes, image_id: int, captions: Sequence[Sequence[int]]) -> bytes:
    """Serialize one image and all its captions."""
    feature = {IMAGE_DATA: tf.train.Feature(bytes_list=tf.train.BytesList(value=[image_bytes])),
               IMAGE_ID: int64_feature([image_id]), **caption_features(captions)}
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString(deterministic=True)  # map order fixed: same input, same bytes


CAPTIONS_SPEC = tf.io.RaggedFeature(
    tf.int64, value_key=CAPTION_IDS, partitions=[tf.io.RaggedFeature.RowLengths(CAPTION_LENGTHS)],
    row_splits_dtype=tf.int64)


def parse_example(serialized: tf.Tensor) -> dict[str, tf.Tensor]:
    """Parse one serialized record (graph-friendly; used inside ``tf.data.map``).

    ``captions`` is ragged, [captions, (words)].
    """
    parsed = tf.io.parse_single_example(serialized, {
        IMAGE_DATA: tf.io.FixedLenFeature([], tf.string),
        IMAGE_ID: tf.io.FixedLenFeature([], tf.int64),
        "captions": CAPTIONS_SPEC,
    })
    return {"serialized": serialized, "image_data": parsed[IMAGE_DATA], "image_id": parsed[IMAGE_ID],
            "captions": parsed["captions"]}


def caption_for_visit(captions: tf.RaggedTensor, image_id: tf.Tensor, visit: tf.Tensor) -> tf.Tensor:
    """The caption an image is trained on at its ``visit``-th pass over the data.

    Each pass over the images shows each image once with one of its captions, in turn — so every
    caption is seen once per ``captions`` passes (an "epoch" of the learning-rate schedule is one
    pass over the captions, as im2txt's) — starting at an image-dependent caption so a pass does
    not show every image's first caption.  Deterministic: a cache-fed and an image-fed run with
    the same seed pick the same captions.
    """
    count = tf.cast(captions.nrows(), tf.int64)
    return captions[tf.math.floormod(tf.cast(visit, tf.int64) + image_id, tf.maximum(count, 1))]


def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}-{index:05d}-of-{count:05d}"


class ShardedWriter:
    """Writes the records of one split round-robin by image into ``count`` shards."""

    def __init__(self, out_dir: Path, split: str, count: int) -> None:
        self.paths = [out_dir / shard_name(split, i, count) for i in range(count)]
        self._tmp = [p.with_name(p.name + ".tmp") for p in self.paths]
        self._writers = [tf.io.TFRecordWriter(str(p)) for p in self._tmp]
        self._next = 0
        self.captions = 0
        self.images = 0

    def write_image(self, image_bytes: bytes, image_id: int, captions: Sequence[Sequence[int]]) -> None:
        """Write one image's record into the next shard."""
        self._writers[self._next].write(make_example(image_bytes, image_id, captions))
        self._next = (self._next + 1) % len(self._writers)
        self.captions += len(captions)
        self.images += 1

    def close(self) -> None:
        """Flush and publish every shard (rename from its temporary name)."""
        for writer, tmp, path in zip(self._writers, self._tmp, self.paths, strict=True):
            writer.close()
            tmp.replace(path)

    def __enter__(self) -> ShardedWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            for writer, tmp in zip(self._writers, self._tmp, strict=True):
                writer.close()
                tmp.unlink(missing_ok=True)


def find_bad_record(files: Sequence[str]) -> str | None:
    """Describe the first unreadable record or undecodable image in ``files``, or None.

    Used after the input pipeline failed, to turn TensorFlow's anonymous
    ``DataLossError``/``InvalidArgumentError`` into a message naming the file.
    """
    for path in files:
        index = -1
        try:
            for index, serialized in enumerate(tf.data.TFRecordDataset(path)):
                record = parse_example(serialized)
                if int(record["captions"].nrows()) == 0:
                    return f"{path}: record {index} (image_id {int(record['image_id'])}) has no captions"
                try:
                    tf.io.decode_image(record["image_data"], channels=3, expand_animations=False)
                except tf.errors.InvalidArgumentError:
                    image_id = int(record["image_id"])
                    return f"{path}: record {index} (image_id {image_id}) holds an undecodable image"
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as exc:
            return f"{path}: corrupt or truncated after record {index} ({first_line(exc)})"
    return None


# -- a feature cache's records (``feature_cache.py``): an image's encoder features and its captions

FEATURES = "features"


def feature_record(image_id: int, features, captions: list[list[int]]) -> bytes:
    """A feature cache's record: the image id, its encoder features (every variant), its captions."""
    feature = {
        IMAGE_ID: tf.train.Feature(int64_list=tf.train.Int64List(value=[image_id])),
        FEATURES: tf.train.Feature(float_list=tf.train.FloatList(value=features.reshape(-1))),
        **caption_features(captions),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(deterministic=True)


def parse_feature_record(serialized: tf.Tensor, size: int) -> dict[str, tf.Tensor]:
    """One record; ``size`` floats of features (variants × feature size: a fixed length parses
    without the sparse detour a variable one takes)."""
    parsed = tf.io.parse_single_example(serialized, {
        IMAGE_ID: tf.io.FixedLenFeature([], tf.int64),
        FEATURES: tf.io.FixedLenFeature([size], tf.float32),
        "captions": CAPTIONS_SPEC,
    })
    return {IMAGE_ID: parsed[IMAGE_ID], FEATURES: parsed[FEATURES], "captions": parsed["captions"]}
