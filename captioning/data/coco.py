"""MSCOCO → showtell shards: ``showtell data coco``.

Reads the MSCOCO captions layout (``images``: id + file_name, ``annotations``: image_id +
caption) from one or more files, splits images like im2txt (train = every image of the train
pools + 85 % of the val pool, val 5 %, test 10 %, shuffled with im2txt's fixed seed) or by a
Karpathy split file, builds the vocabulary from the training captions only, and writes one record
per image holding all its captions (``records.make_example``) — so evaluation reads every
reference of an image from its record.

Images are read and validated in parallel (threads; TensorFlow's decoder releases the GIL).
Missing, empty and undecodable images are skipped and listed in ``bad-images.tsv``.  Shards are
planned up front (image k of a split → shard k mod S), each written under a temporary name and
renamed, then its sidecar ``.<shard>.json`` (images, captions, skipped) is written: a shard counts as done
only when its sidecar exists and its record count matches, so an interrupted build resumes by
redoing only unfinished shards — and produces the same bytes as an uninterrupted one.
"""

from __future__ import annotations

import json
import logging
import os
import random
import sys
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import tensorflow as tf
from tqdm import tqdm

from showtell.captioning.config import CocoConfig
from showtell.captioning.data.dataset import VOCAB, Manifest, SplitInfo, existing_build
from showtell.captioning.data.records import make_example, shard_name
from showtell.captioning.data.vocab import Vocabulary, read_vocabulary, tokenize
from showtell.common import logs
from showtell.common.errors import DataError, first_line
from showtell.common.files import write_atomic

log = logging.getLogger(__name__)

BUILDER = "coco"
SPLITS = ("train", "val", "test")
IM2TXT_SEED = 12345  # im2txt's build_mscoco_data.py shuffles with this seed
REPORT = "bad-images.tsv"


@dataclass
class CocoImage:
    image_id: int
    file_name: str
    pool: str  # "train" (a train captions file) or "val"
    captions: list[str] = field(default_factory=list)


def load_captions(files: Sequence[Path]) -> list[CocoImage]:
    """All images with at least one caption, from every captions file (first file wins on ids)."""
    images: dict[int, CocoImage] = {}
    for path in files:
        try:
            data = json.loads(Path(path).read_text())
            entries, annotations = data["images"], data["annotations"]
        except FileNotFoundError as exc:
            raise DataError(f"--captions {path}: no such file") from exc
        except (ValueError, KeyError, TypeError) as exc:
            raise DataError(f"--captions {path}: not an MSCOCO captions file (needs 'images' and "
                            f"'annotations'): {exc}") from exc
        pool = "train" if "train" in Path(path).name else "val"
        mine: dict[int, CocoImage] = {}
        for entry in entries:
            image_id = int(entry["id"])
            if image_id not in images:
                mine[image_id] = CocoImage(image_id, entry["file_name"], pool)
        for annotation in annotations:
            image = mine.get(int(annotation["image_id"]))
            if image is not None:
                image.captions.append(str(annotation["caption"]).strip())
        images.update({i: img for i, img in mine.items() if img.captions})
    if not images:
        raise DataError(f"--captions {', '.join(map(str, files))}: no captioned images")
    return sorted(images.values(), key=lambda i: i.image_id)


def split_im2txt(images: list[CocoImage]) -> dict[str, list[CocoImage]]:
    """im2txt's split: train pools whole; the val pool shuffled (fixed seed), 85/5/10 %."""
    train = [i for i in images if i.pool == "train"]
    pool = [i for i in images if i.pool == "val"]
    random.Random(IM2TXT_SEED).shuffle(pool)
    n_train, n_val = round(0.85 * len(pool)), round(0.05 * len(pool))
    return {"train": train + pool[:n_train], "val": pool[n_train:n_train + n_val],
            "test": pool[n_train + n_val:]}


def split_karpathy(images: list[CocoImage], karpathy_json: Path) -> dict[str, list[CocoImage]]:
    """The Karpathy split file (``dataset_coco.json``): restval joins train."""
    try:
        entries = json.loads(Path(karpathy_json).read_text())["images"]
        assignment = {int(e["cocoid"]): e["split"] for e in entries}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"--karpathy-json {karpathy_json}: not a Karpathy split file ({exc})") from exc
    splits: dict[str, list[CocoImage]] = {s: [] for s in SPLITS}
    for image in images:
        split = {"restval": "train"}.get(assignment.get(image.image_id, ""), assignment.get(image.image_id))
        if split in splits:
            splits[split].append(image)
    return splits


def check_image(image: CocoImage, image_dirs: Sequence[Path]) -> tuple[bytes | None, str, str | None]:
    """(bytes or None, path, reason it is unusable or None)."""
    path = next((d / image.file_name for d in image_dirs if (d / image.file_name).is_file()), None)
    if path is None:
        return None, str(image_dirs[0] / image.file_name), "missing"
    try:
        data = path.read_bytes()
    except OSError as exc:
        return None, str(path), f"unreadable ({exc.strerror})"
    if not data:
        return None, str(path), "empty file"
    try:
        tf.io.decode_image(data, channels=3, expand_animations=False)
    except (tf.errors.InvalidArgumentError, tf.errors.UnknownError) as exc:
        return None, str(path), f"undecodable ({first_line(exc)})"
    return data, str(path), None


@dataclass
class ShardResult:
    captions: int
    images: int  # = records
    bad: list[tuple[str, str]]  # (path, reason)


def build(out_dir: Path, config: CocoConfig) -> Manifest:
    """Write train/val/test shards, ``vocab.txt``, ``bad-images.tsv`` and ``dataset.json``."""
    source = _source(config)
    existing = existing_build(out_dir, BUILDER)
    if existing is not None:
        if existing.builder == BUILDER and existing.source == source:
            log.info("%s already holds this COCO dataset; nothing to do", out_dir)
            return existing
        raise DataError(f"{out_dir}: already holds a different dataset ({existing.builder}); choose "
                        "another --out or delete that directory")
    images = load_captions(config.captions)
    splits = split_karpathy(images, config.karpathy_json) if config.split == "karpathy" \
        else split_im2txt(images)
    vocab = _vocabulary(splits["train"], config)
    out_dir.mkdir(parents=True, exist_ok=True)
    _save_vocab(out_dir, vocab)
    shard_counts = {"train": config.train_shards, "val": config.val_shards, "test": config.test_shards}
    total = sum(len(v) for v in splits.values())
    infos, bad, kept = {}, [], 0
    with ThreadPoolExecutor(config.workers) as pool, \
            tqdm(total=total, desc="coco", unit="img", file=sys.stderr,
                 mininterval=2 if sys.stderr.isatty() else 30, disable=not logs.progress_bars()) as bar:
        for split in SPLITS:
            count = max(1, min(shard_counts[split], len(splits[split]) or 1))
            captions = images_written = 0
            for index in range(count):
                plan = splits[split][index::count]
                result = _finished(out_dir, split, index, count)
                if result is None:
                    result = _write_shard(out_dir, split, index, count, plan, vocab, config, pool)
                else:
                    kept += 1
                captions += result.captions
                images_written += result.images
                bad += [(split, path, reason) for path, reason in result.bad]
                bar.update(len(plan))
            infos[split] = SplitInfo(images=images_written, captions=captions, shards=count)
    _write_report(out_dir, bad)
    manifest = Manifest(builder=BUILDER, image_size=0, vocab_size=len(vocab), splits=infos, source=source)
    manifest.save(out_dir)
    reasons = Counter(reason.split(" (")[0] for _, _, reason in bad)
    log.info("wrote %s: %s; vocabulary %d words (%s)%s; %d image(s) skipped%s — listed in %s",
             out_dir, ", ".join(f"{s}: {infos[s].images} images, {infos[s].captions} captions"
                                for s in SPLITS),
             len(vocab), f"--vocab {config.vocab}" if config.vocab else f"min count {config.min_word_count}",
             f"; kept {kept} finished shard(s)" if kept else "",
             len(bad), f" ({', '.join(f'{r}: {n}' for r, n in sorted(reasons.items()))})" if bad else "",
             out_dir / REPORT)
    return manifest


def _write_shard(out_dir: Path, split: str, index: int, count: int, plan: list[CocoImage],
                 vocab: Vocabulary, config: CocoConfig, pool: ThreadPoolExecutor) -> ShardResult:
    path = out_dir / shard_name(split, index, count)
    tmp = path.with_name(path.name + ".tmp")
    result = ShardResult(0, 0, [])
    with tf.io.TFRecordWriter(str(tmp)) as writer:
        for image, (data, file_path, reason) in zip(
                plan, pool.map(lambda i: check_image(i, config.images), plan), strict=True):
            if reason is not None:
                result.bad.append((file_path, reason))
                continue
            writer.write(make_example(data, image.image_id, [vocab.encode(c) for c in image.captions]))
            result.captions += len(image.captions)
            result.images += 1
    tmp.replace(path)
    write_atomic(_sidecar(out_dir, path.name), json.dumps(asdict(result)) + "\n")
    return result


def _finished(out_dir: Path, split: str, index: int, count: int) -> ShardResult | None:
    """A shard from an earlier (interrupted) run that is complete: sidecar present, counts agree."""
    path = out_dir / shard_name(split, index, count)
    sidecar = _sidecar(out_dir, path.name)
    if not (path.is_file() and sidecar.is_file()):
        return None
    try:
        raw = json.loads(sidecar.read_text())
        result = ShardResult(raw["captions"], raw["images"], [tuple(b) for b in raw["bad"]])
        found = sum(1 for _ in tf.data.TFRecordDataset(str(path)))
    except (ValueError, KeyError, TypeError, tf.errors.OpError):
        return None
    return result if found == result.images else None


def _sidecar(out_dir: Path, shard: str) -> Path:
    return out_dir / f".{shard}.json"


def _vocabulary(train: list[CocoImage], config: CocoConfig) -> Vocabulary:
    """The training captions' own vocabulary, or ``--vocab``'s (then: how much of the captions
    it covers — the rest is trained as ``<UNK>``)."""
    captions = (c for image in train for c in image.captions)
    if not config.vocab:
        return Vocabulary.build(captions, config.min_word_count)
    vocab = read_vocabulary(Path(config.vocab), "--vocab")
    counts = Counter(word for caption in captions for word in tokenize(caption))
    known = sum(n for word, n in counts.items() if vocab.word_to_id(word) != vocab.unknown_id)
    missing = sorted((w for w in counts if vocab.word_to_id(w) == vocab.unknown_id), key=lambda w: -counts[w])
    log.info("vocabulary from --vocab %s: %d words (--min-word-count not used); it covers %.1f %% of the "
             "training captions' words (most frequent it lacks: %s)", config.vocab, len(vocab),
             100 * known / max(1, sum(counts.values())), " ".join(missing[:8]) or "none")
    return vocab


def _save_vocab(out_dir: Path, vocab: Vocabulary) -> None:
    """Write ``vocab.txt``; a resumed build must find the same one (same captions, same rule)."""
    path = out_dir / VOCAB
    if path.is_file() and Vocabulary.load(path) != vocab:
        raise DataError(f"{path}: differs from the vocabulary these captions give; an earlier build "
                        "used other inputs — use another --out or delete that directory")
    vocab.save(path)


def _write_report(out_dir: Path, bad: list[tuple[str, str, str]]) -> None:
    lines = ["split\tpath\treason"] + [f"{split}\t{path}\t{reason}" for split, path, reason in bad]
    write_atomic(out_dir / REPORT, "\n".join(lines) + "\n")


def _source(config: CocoConfig) -> dict:
    """Provenance recorded in ``dataset.json``: input files (size, mtime), split, counts rule."""
    def stat(path: Path) -> dict:
        st = os.stat(path) if Path(path).exists() else None
        return {"path": str(path), "size": st.st_size if st else None,
                "mtime_ns": st.st_mtime_ns if st else None}

    return {
        "captions": [stat(p) for p in config.captions],
        "images": [str(p) for p in config.images],
        "split": config.split,
        "karpathy_json": stat(config.karpathy_json) if config.karpathy_json else None,
        "min_word_count": config.min_word_count,
        "vocab": stat(Path(config.vocab)) if config.vocab else None,
        "shards": {"train": config.train_shards, "val": config.val_shards, "test": config.test_shards},
    }
