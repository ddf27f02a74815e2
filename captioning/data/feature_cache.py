"""The phase-1 feature cache: Inception's pooled output, computed once per image and variant.

While the encoder is frozen its output for an image never changes, yet im2txt recomputes it
for every example of every step.  The cache computes it once — per image, and per augmented
variant (``CacheConfig.variants``) — into TFRecord shards beside the dataset, and training reads
those shards through the same ``tf.data`` pipeline as image shards (``inputs.train_pipeline``).

The evaluator keeps one too (``evaluator/scoring/features.py``): while checkpoints share an
encoder, each validation image's features are computed once and every later checkpoint reads them.

A cache lives in ``<root>/<key digest>/`` and is found again only by the same key: the encoder's
weight values, the image size, the preprocessing (version and augmentation settings), the number
of variants and the dataset (its manifest and every shard's name, size and mtime).  Change any of
them and a new cache is built.

One format for both: ``cache.json`` (the key, the feature size, and the *parts*: each file's name,
images and sha256) and the part files it lists, which hold the set's images in its file order.  A
part is used only once ``cache.json`` lists it, and its bytes are checked against its sha256 when
read — a torn or damaged file is found before anything reads a feature from it.  The trainer
writes one part per source shard into a temporary directory renamed into place when complete; the
evaluator appends parts as it computes them (each renamed into place, then listed by an atomic
rewrite of ``cache.json``), so a restarted or interrupted evaluation keeps what it finished.

One record per image, the dataset's own format (``records``) with ``features`` ([variants × 2048]
floats) in place of the image: ``image/image_id``, ``features``, every caption of the image
(``captions/ids`` flattened, ``captions/lengths``), in the order of the source shard — so with a
fixed seed and ``InputConfig.deterministic`` training on the cache sees exactly the examples, in
exactly the order, that training on images would.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import tensorflow as tf
from tqdm import tqdm

from showtell.captioning.config import InputConfig
from showtell.captioning.data import inputs
from showtell.captioning.data.dataset import MANIFEST
from showtell.captioning.data.records import (
    FEATURES,
    IMAGE_ID,
    caption_for_visit,
    feature_record,
    parse_example,
    parse_feature_record,
)
from showtell.common import logs
from showtell.common.errors import DataError
from showtell.common.files import sha256_of, write_atomic

log = logging.getLogger(__name__)

# 3: parts listed with their sha256 in cache.json; 2: captions chosen per visit, like image records
# (1 expanded every caption per visit)
FORMAT = 3
# Bump when ``inputs.preprocess_image`` changes what the encoder is shown: old caches then miss.
PREPROCESSING_VERSION = 1
INFO = "cache.json"

Encoder = Callable[[tf.Tensor], tf.Tensor]  # images [N, S, S, 3] in [-1, 1] → features [N, D]


class CacheDamaged(DataError):
    """A listed part whose bytes are not the ones ``cache.json`` recorded (torn, truncated, edited)."""


@dataclass(frozen=True)
class Part:
    """One file of a cache: ``images`` consecutive images of the set, in its file order."""

    file: str
    images: int
    sha256: str

    def as_dict(self) -> dict:
        return {"file": self.file, "images": self.images, "sha256": self.sha256}


def cache_key(data_dir: Path, files: Sequence[str], encoder_digest: str, image_size: int,
              config: InputConfig, variants: int) -> dict:
    """Everything that decides a cache's content."""
    augmentation = None
    if variants > 1:  # variant 0 is un-augmented; only the others depend on these settings
        augmentation = {"crop_scale": config.crop_scale, "brightness_delta": config.brightness_delta,
                        "contrast_range": list(config.contrast_range)}
    shards = [[Path(f).name, os.stat(f).st_size, os.stat(f).st_mtime_ns] for f in files]
    return {
        "format": FORMAT,
        "preprocessing": PREPROCESSING_VERSION,
        "encoder_weights_sha256": encoder_digest,
        "image_size": image_size,
        "variants": variants,
        "augmentation": augmentation,
        "dataset": {"manifest_sha256": sha256_of([data_dir / MANIFEST]), "shards": shards},
    }


@dataclass(frozen=True)
class BuildStats:
    images: int
    forward_passes: int  # encoder outputs computed (images × variants)
    seconds: float
    # The first batch carries one-off costs (graph tracing, pipeline start): the steady rate
    # after it is what a long build runs at.
    first_batch_images: int = 0
    first_batch_seconds: float = 0.0

    @property
    def images_per_sec(self) -> float:
        return self.images / max(self.seconds, 1e-9)

    @property
    def steady_images_per_sec(self) -> float:
        return (self.images - self.first_batch_images) / max(self.seconds - self.first_batch_seconds, 1e-9)


class FeatureCache:
    """One cache directory, identified by its key."""

    def __init__(self, root: Path, key: dict) -> None:
        self.root, self.key = root, key
        self.digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        self.dir = root / self.digest[:16]
        self.variants = int(key["variants"])

    def info(self) -> dict | None:
        """``cache.json`` when it is this key's (None: no cache, or another key's or format's)."""
        try:
            info = json.loads((self.dir / INFO).read_text())
            return info if info["key"] == self.key else None
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def ready(self) -> bool:
        """A complete cache for exactly this key exists (the trainer's: every source shard's part)."""
        info = self.info()
        return bool(info and info.get("complete"))

    def parts(self) -> list[Part]:
        info = self.info() or {}
        return [Part(p["file"], int(p["images"]), p["sha256"]) for p in info.get("parts", [])]

    def files(self) -> list[str]:
        return [str(self.dir / p.file) for p in self.parts()]

    def verify(self) -> list[Part]:
        """The listed parts, each file's bytes checked against its recorded sha256 (≈ 0.1 s per
        5,000 images' features); ``CacheDamaged`` names the first that differs."""
        parts = self.parts()
        for part in parts:
            path = self.dir / part.file
            try:
                actual = sha256_of([path])
            except OSError as exc:
                raise CacheDamaged(f"{path}: unreadable ({exc.strerror or exc})") from exc
            if actual != part.sha256:
                raise CacheDamaged(f"{path}: its bytes are not the ones {INFO} recorded (torn or "
                                   f"damaged; {path.stat().st_size} bytes)")
        return parts

    def discard(self) -> None:
        """Remove this cache whole (a damaged one is rebuilt; an evicted one goes)."""
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- building -------------------------------------------------------------------------------

    def build(self, encoder: Encoder, source_files: Sequence[str], image_size: int, config: InputConfig,
              batch_size: int) -> BuildStats:
        """Run every image (× variants) through ``encoder`` once; publish the cache atomically."""
        started = time.monotonic()
        groups = [_captions_by_image(f) for f in source_files]
        total = sum(len(g) for g in groups)
        tmp = self.root / f".{self.dir.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            forward = self._forward_fn(encoder, image_size)
            batches = inputs.checked(self._views(source_files, image_size, config, batch_size), source_files)
            passes, feature_size, first = self._write(tmp, source_files, groups, batches, forward, total)
            stats = BuildStats(total, passes, time.monotonic() - started, first[0], first[1] - started)
            parts = [Part(Path(f).name, len(g), sha256_of([tmp / Path(f).name]))
                     for f, g in zip(source_files, groups, strict=True)]
            info = {"key": self.key, "images": total, "forward_passes": passes, "feature_size": feature_size,
                    "build_seconds": round(stats.seconds, 3), "complete": True,
                    "records": [len(g) for g in groups], "parts": [p.as_dict() for p in parts]}
            (tmp / INFO).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
            self._publish(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return stats

    def _views(self, files: Sequence[str], image_size: int, config: InputConfig,
               batch_size: int) -> tf.data.Dataset:
        """Each image once, in file order, as [variants, S, S, 3]: the plain view, then crops."""
        variants = self.variants

        def views(record: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
            image = inputs.decode_image(record["image_data"])
            out = [inputs.preprocess_image(image, image_size, False, config)]
            for v in range(1, variants):
                seed = tf.stack([record["image_id"], tf.constant(v, tf.int64)])
                out.append(inputs.preprocess_image(image, image_size, True, config, seed=seed))
            return record["image_id"], tf.stack(out)

        images = tf.data.TFRecordDataset(list(files)).map(inputs.graph_fn(parse_example))
        ds = images.map(inputs.graph_fn(views), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return inputs.one_pass(ds.batch(max(1, batch_size // variants)).prefetch(2))

    def _forward_fn(self, encoder: Encoder, image_size: int):
        @tf.function(input_signature=[tf.TensorSpec([None, self.variants, image_size, image_size, 3])],
                     autograph=False)
        def forward(views: tf.Tensor) -> tf.Tensor:
            flat = tf.reshape(views, [-1, image_size, image_size, 3])
            features = encoder(flat)
            return tf.reshape(features, [tf.shape(views)[0], self.variants, -1])

        return forward

    def _write(self, tmp: Path, files: Sequence[str], groups: list[list[tuple[int, list]]],
               batches, forward, total: int) -> tuple[int, int, tuple[int, float]]:
        """Write each image's record into the shard its images came from.

        Returns (forward passes, feature size, (images in the first batch, when it was done)).
        """
        order = [(shard, image_id, captions) for shard, g in enumerate(groups) for image_id, captions in g]
        writers = [tf.io.TFRecordWriter(str(tmp / Path(f).name)) for f in files]
        passes, position, feature_size, first = 0, 0, 0, (0, time.monotonic())
        bar = tqdm(total=total, desc="feature cache", unit="img", file=sys.stderr,
                   mininterval=2 if sys.stderr.isatty() else 30, disable=not logs.progress_bars())
        try:
            for image_ids, views in batches:
                features = forward(views).numpy()
                passes += features.shape[0] * features.shape[1]
                feature_size = features.shape[2]
                for image_id, image_features in zip(image_ids.numpy(), features, strict=True):
                    shard, expected_id, captions = order[position]
                    if int(image_id) != expected_id:
                        raise DataError(f"{files[shard]}: image {expected_id} was not where the first "
                                        "read found it (the shard changed?); rebuild the dataset")
                    writers[shard].write(feature_record(expected_id, image_features, captions))
                    position += 1
                bar.update(len(image_ids))
                if not first[0]:
                    first = (len(image_ids), time.monotonic())
        finally:
            bar.close()
            for writer in writers:
                writer.close()
        if position != total:
            raise DataError(f"{', '.join(files)}: read {position} images, expected {total}; "
                            "rebuild the dataset")
        return passes, feature_size, first

    def _publish(self, tmp: Path) -> None:
        try:
            tmp.rename(self.dir)
        except OSError:
            if not self.ready():  # not another trainer that finished the same cache first
                raise

    # -- reading --------------------------------------------------------------------------------

    def train_dataset(self, config: InputConfig, batch_size: int) -> tf.data.Dataset:
        """Endless shuffled padded batches of {features, image_id, input_ids, target_ids, mask}."""
        return inputs.train_pipeline(self.files(), self._example_fn(), config, batch_size)

    def _example_fn(self):
        """(visit, record) → one example: a (random) variant's features and the visit's caption."""
        variants = self.variants
        feature_size = json.loads((self.dir / INFO).read_text())["feature_size"]

        def example(visit: tf.Tensor, serialized: tf.Tensor) -> dict[str, tf.Tensor]:
            record = parse_feature_record(serialized, variants * feature_size)
            features = tf.reshape(record[FEATURES], [variants, feature_size])
            pick = 0 if variants == 1 else tf.random.uniform([], 0, variants, tf.int32)
            caption = caption_for_visit(record["captions"], record[IMAGE_ID], visit)
            return {"features": features[pick], "image_id": record[IMAGE_ID],
                    **inputs.split_caption(caption)}

        return example


    def eval_dataset(self, parts: Sequence[Part], images: int, batch_size: int) -> tf.data.Dataset:
        """The first ``images`` of ``parts`` (verified), in order, batched as the evaluation's image
        batches are: {features [B, D], image_id [B], captions ragged [B, (captions), (words)]}."""
        feature_size = int((self.info() or {})["feature_size"])
        files = [str(self.dir / p.file) for p in parts]

        def example(serialized: tf.Tensor) -> dict[str, tf.Tensor]:
            record = parse_feature_record(serialized, self.variants * feature_size)
            return {"features": tf.reshape(record[FEATURES], [self.variants, feature_size])[0],
                    "image_id": record[IMAGE_ID], "captions": record["captions"]}

        ds = tf.data.TFRecordDataset(files).take(images).map(inputs.graph_fn(example),
                                                             num_parallel_calls=tf.data.AUTOTUNE)
        return inputs.one_pass(ds.batch(batch_size).prefetch(tf.data.AUTOTUNE))

    def appender(self, part_images: int = 1024) -> Appender:
        """Append images after the listed parts, a part every ``part_images`` (``Appender``)."""
        return Appender(self, part_images)


class Appender:
    """Features appended to a cache as an evaluation computes them: written to a hidden file, which
    becomes a part by a rename and then by an atomic rewrite of ``cache.json`` listing it — so a
    crash or a full disk at any moment leaves the parts listed before, whole, and nothing else used.
    An ``OSError`` (a full disk) propagates; the caller stops appending and evaluates on."""

    def __init__(self, cache: FeatureCache, part_images: int) -> None:
        self.cache, self.part_images = cache, part_images
        self._records: list[bytes] = []
        self.feature_size = 0
        self.written = 0  # images in parts this appender listed

    def add(self, image_ids, features, captions) -> None:
        """One batch: image ids [B], features [B, D] and each image's caption ids (lists)."""
        for image_id, feature, caption in zip(image_ids, features, captions, strict=True):
            self._records.append(feature_record(int(image_id), feature, caption))
        self.feature_size = int(features.shape[-1])
        if len(self._records) >= self.part_images:
            self.flush()

    def flush(self) -> None:
        """List what was added so far as one part (nothing when nothing was added)."""
        if not self._records:
            return
        cache, records, self._records = self.cache, self._records, []
        cache.dir.mkdir(parents=True, exist_ok=True)
        parts = cache.parts()
        name = f"part-{len(parts):05d}"
        tmp = cache.dir / f".{name}.tmp-{os.getpid()}"
        try:
            try:
                with tf.io.TFRecordWriter(str(tmp)) as writer:
                    for record in records:
                        writer.write(record)
            except tf.errors.OpError as exc:  # TensorFlow's word for a full disk: ResourceExhausted
                raise OSError(exc.message.rsplit("; ", 1)[-1]) from exc
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            part = Part(name, len(records), sha256_of([tmp]))
            os.replace(tmp, cache.dir / name)
            info = {"key": cache.key, "feature_size": self.feature_size, "complete": False,
                    "parts": [p.as_dict() for p in (*parts, part)]}
            write_atomic(cache.dir / INFO, json.dumps(info, indent=2, sort_keys=True) + "\n")
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self.written += part.images


def ensure_cache(root: Path, key: dict, encoder: Encoder, source_files: Sequence[str], image_size: int,
                 config: InputConfig, batch_size: int) -> tuple[FeatureCache, BuildStats | None]:
    """The cache for ``key``: reused when complete, else built now (None stats when reused)."""
    cache = FeatureCache(root, key)
    if cache.ready():
        try:
            cache.verify()
        except CacheDamaged as exc:
            log.warning("feature cache: %s; rebuilding it", exc)
            cache.discard()
    if cache.ready():
        log.info("feature cache: reusing %s (%d variant%s per image; 0 encoder forward passes)",
                 cache.dir, cache.variants, "" if cache.variants == 1 else "s")
        return cache, None
    others = [p.name for p in root.glob("*") if p.is_dir() and not p.name.startswith(".") and p != cache.dir]
    log.info("feature cache: building %s (%d variant%s per image, %d px)%s", cache.dir, cache.variants,
             "" if cache.variants == 1 else "s", image_size,
             f"; {len(others)} other cache(s) in {root} were built for other keys" if others else "")
    stats = cache.build(encoder, source_files, image_size, config, batch_size)
    log.info("feature cache: %d images, %d encoder forward passes in %.1f s (%.1f images/s; %.1f after "
             "the first batch)", stats.images, stats.forward_passes, stats.seconds, stats.images_per_sec,
             stats.steady_images_per_sec)
    return cache, stats


# -- records ------------------------------------------------------------------------------------

def _captions_by_image(path: str) -> list[tuple[int, list]]:
    """[(image id, [caption ids…])] in shard order."""
    ds = inputs.caption_records([path])
    return [(int(image_id), captions.to_list()) for image_id, captions in inputs.checked(ds, [path])]
