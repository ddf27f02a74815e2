"""``dataset.json``: what a dataset directory holds, written last by every builder.

Readers check it before touching shards, so a half-built or mismatched dataset fails with a
message naming the directory instead of deep inside ``tf.data``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from showtell.captioning.data.vocab import Vocabulary
from showtell.common.errors import DataError
from showtell.common.files import write_atomic

MANIFEST = "dataset.json"
VOCAB = "vocab.txt"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class SplitInfo:
    images: int
    records: int
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
            raw["splits"] = {k: SplitInfo(**v) for k, v in raw["splits"].items()}
            manifest = cls(**raw)
        except (ValueError, TypeError, KeyError) as exc:
            raise DataError(f"{path}: unreadable manifest ({exc}); rebuild the dataset") from exc
        if manifest.version != FORMAT_VERSION:
            raise DataError(
                f"{path}: format version {manifest.version}, this showtell reads {FORMAT_VERSION}; "
                "rebuild the dataset"
            )
        return manifest


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
