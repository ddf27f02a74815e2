"""``dataset.json``: what a dataset directory holds, written last by every builder.

Readers check it before touching shards, so a half-built or mismatched dataset fails with a
message naming the directory instead of deep inside ``tf.data``.
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
