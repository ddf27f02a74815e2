"""The TFRecord schema and sharded writing/reading of it.

One ``tf.train.SequenceExample`` per (image, caption) pair, as im2txt:
context ``image/data`` (encoded JPEG/PNG) and ``image/image_id``; feature list
``image/caption_ids`` (int64 word ids including ``<S>`` and ``</S>``).

Shards are written under a temporary name and renamed when complete, so a crashed build
never leaves a shard that looks finished.  All records of one image go to the same shard,
consecutively, so evaluation can gather every reference of an image in one pass.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import tensorflow as tf

from showtell.common.errors import DataError, first_line

log = logging.getLogger(__name__)

IMAGE_DATA = "image/data"
IMAGE_ID = "image/image_id"
CAPTION_IDS = "image/caption_ids"


def make_example(image_bytes: bytes, image_id: int, caption_ids: Sequence[int]) -> bytes:
    """Serialize one (image, caption) pair."""
    context = tf.train.Features(
        feature={
            IMAGE_DATA: tf.train.Feature(bytes_list=tf.train.BytesList(value=[image_bytes])),
            IMAGE_ID: tf.train.Feature(int64_list=tf.train.Int64List(value=[image_id])),
        }
    )
    words = [tf.train.Feature(int64_list=tf.train.Int64List(value=[int(i)])) for i in caption_ids]
    lists = tf.train.FeatureLists(feature_list={CAPTION_IDS: tf.train.FeatureList(feature=words)})
    example = tf.train.SequenceExample(context=context, feature_lists=lists)
    return example.SerializeToString(deterministic=True)  # map order fixed: same input, same bytes


def parse_example(serialized: tf.Tensor) -> dict[str, tf.Tensor]:
    """Parse one serialized record (graph-friendly; used inside ``tf.data.map``)."""
    context, sequence = tf.io.parse_single_sequence_example(
        serialized,
        context_features={
            IMAGE_DATA: tf.io.FixedLenFeature([], tf.string),
            IMAGE_ID: tf.io.FixedLenFeature([], tf.int64),
        },
        sequence_features={CAPTION_IDS: tf.io.FixedLenSequenceFeature([], tf.int64)},
    )
    return {
        "serialized": serialized,
        "image_data": context[IMAGE_DATA],
        "image_id": context[IMAGE_ID],
        "caption": sequence[CAPTION_IDS],
    }


def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}-{index:05d}-of-{count:05d}"


class ShardedWriter:
    """Writes records of one split round-robin by image into ``count`` shards."""

    def __init__(self, out_dir: Path, split: str, count: int) -> None:
        self.paths = [out_dir / shard_name(split, i, count) for i in range(count)]
        self._tmp = [p.with_name(p.name + ".tmp") for p in self.paths]
        self._writers = [tf.io.TFRecordWriter(str(p)) for p in self._tmp]
        self._next = 0
        self.records = 0
        self.images = 0

    def write_image(self, records: Sequence[bytes]) -> None:
        """Write all records of one image, together, into the next shard."""
        writer = self._writers[self._next]
        for record in records:
            writer.write(record)
        self._next = (self._next + 1) % len(self._writers)
        self.records += len(records)
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


def shard_files(data_dir: Path, split: str) -> list[str]:
    """The complete shards of ``split``, sorted; a clear error when there are none."""
    files = sorted(str(p) for p in data_dir.glob(f"{split}-?????-of-?????"))
    if not files:
        raise DataError(
            f"{data_dir}: no '{split}-NNNNN-of-NNNNN' shards; build data with "
            f"`showtell data synthetic --out {data_dir}`"
        )
    return files


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
                try:
                    tf.io.decode_image(record["image_data"], channels=3, expand_animations=False)
                except tf.errors.InvalidArgumentError:
                    image_id = int(record["image_id"])
                    return f"{path}: record {index} (image_id {image_id}) holds an undecodable image"
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as exc:
            return f"{path}: corrupt or truncated after record {index} ({first_line(exc)})"
    return None
