"""A dataset directory as the services read it: ``dataset.json`` (its manifest, written last by
every builder), its vocabulary, and its splits — the one place that knows which split a training
set and an evaluation set read and where a split's records are, so that adding a kind of set (a
test split, say) touches this module.  No TensorFlow: the commands check their flags with it.

Readers check the manifest before touching shards, so a half-built or mismatched dataset fails
with a message naming the directory instead of deep inside ``tf.data``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

from showtell.captioning.data.vocab import VOCAB, Vocabulary
from showtell.common.errors import DataError
from showtell.common.files import write_atomic

log = logging.getLogger(__name__)

MANIFEST = "dataset.json"
# 2: one record per image with all its captions (1 was one record per caption, as im2txt).
FORMAT_VERSION = 2


@dataclass(frozen=True)
class SplitInfo:
    images: int  # records: one per image
    captions: int
    shards: int


@dataclass(frozen=True)
class Manifest:
    builder: str
    image_size: int  # stored images are this many pixels square (0: variable sizes)
    vocab_size: int
    splits: dict[str, SplitInfo]
    version: int = FORMAT_VERSION
    source: dict = field(default_factory=dict)  # builder-specific provenance (seed, files…)

    def save(self, data_dir: Path) -> None:
        write_atomic(data_dir / MANIFEST, json.dumps(asdict(self), indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, data_dir: Path) -> Manifest:
        path = data_dir / MANIFEST
        if not data_dir.is_dir():
            raise DataError(
                f"{data_dir}: data directory does not exist; build one with "
                f"`showtell data synthetic --out {data_dir}`"
            )
        if not path.is_file():
            raise DataError(
                f"{path}: missing (not a showtell dataset, or its build did not finish); "
                f"rebuild with `showtell data synthetic --out {data_dir}`"
            )
        try:
            raw = json.loads(path.read_text())
            version = raw.get("version")
            if version != FORMAT_VERSION:
                raise DataError(
                    f"{path}: dataset format {version}"
                    f"{' (one record per caption)' if version == 1 else ''}, this showtell reads "
                    f"{FORMAT_VERSION} (one record per image); rebuild it with `showtell data "
                    f"{raw.get('builder', 'synthetic')} --out {data_dir}` (and the same inputs)")
            raw["splits"] = {k: SplitInfo(**v) for k, v in raw["splits"].items()}
            return cls(**raw)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise DataError(f"{path}: unreadable manifest ({exc}); rebuild the dataset") from exc


def existing_build(out_dir: Path, builder: str) -> Manifest | None:
    """The manifest of a dataset a builder finds in its ``--out``; None when there is none — or
    when it is this builder's in an older format, which the build then replaces in place (its
    shards have the same names; the manifest, written last, is removed first)."""
    path = out_dir / MANIFEST
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text())
    except ValueError:
        raw = {}
    if raw.get("builder") == builder and raw.get("version") != FORMAT_VERSION:
        log.warning("%s: dataset format %s, rebuilding it in format %d (one record per image)",
                    out_dir, raw.get("version"), FORMAT_VERSION)
        path.unlink()
        return None
    return Manifest.load(out_dir)


def load_dataset(data_dir: Path) -> tuple[Manifest, Vocabulary]:
    """Manifest and vocabulary of ``data_dir``, checked against each other."""
    manifest = Manifest.load(data_dir)
    vocab = Vocabulary.load(data_dir / VOCAB)
    if len(vocab) != manifest.vocab_size:
        raise DataError(
            f"{data_dir / VOCAB}: {len(vocab)} words but {MANIFEST} says {manifest.vocab_size}; "
            "rebuild the dataset"
        )
    return manifest, vocab


# -- splits: what training and evaluation read ----------------------------------------------

TRAIN = "train"  # the split training reads (and pretraining's classifier heads)
EVAL = "val"  # the split an evaluation set reads: --data's, and each --eval-set's
SHARDS = "{split}-?????-of-?????"  # a split's records: train-00000-of-00016, …


def shard_files(data_dir: Path, split: str) -> list[str]:
    """The complete shards of ``split``, sorted; a clear error when there are none."""
    files = sorted(str(p) for p in data_dir.glob(SHARDS.format(split=split)))
    if not files:
        raise DataError(
            f"{data_dir}: no '{split}-NNNNN-of-NNNNN' shards; build data with "
            f"`showtell data synthetic --out {data_dir}`"
        )
    return files


@dataclass(frozen=True)
class SplitData:
    """One split of a dataset as read once: its manifest (which fixes vocabulary and image size),
    vocabulary and shards."""

    dir: Path
    split: str
    manifest: Manifest
    vocab: Vocabulary
    files: list[str]

    @property
    def image_size(self) -> int:
        """The stored images' size in pixels (0: sizes vary)."""
        return self.manifest.image_size

    @property
    def images(self) -> int:
        """The split's images, as its manifest counts them (0 when it names none)."""
        info = self.manifest.splits.get(self.split)
        return info.images if info else 0


def read_split(data_dir: Path, split: str) -> SplitData:
    """``split`` of ``data_dir``: its manifest and vocabulary (checked against each other) and shards."""
    manifest, vocab = load_dataset(data_dir)  # first: a missing dir is said as such
    return SplitData(data_dir, split, manifest, vocab, shard_files(data_dir, split))


def evaluation_problem(data_dir: Path) -> str | None:
    """Why ``data_dir`` cannot be an evaluation set (one line), or None."""
    try:
        manifest, _ = load_dataset(data_dir)
    except (DataError, OSError) as exc:
        return str(exc).splitlines()[0]
    info = manifest.splits.get(EVAL)
    if info is None or not info.images or not list(data_dir.glob(SHARDS.format(split=EVAL))):
        return (f"no validation records ({EVAL}-NNNNN-of-NNNNN shards) there; build one with "
                f"`showtell data synthetic --out {data_dir}` or point at a dataset directory")
    return None
