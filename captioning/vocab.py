"""Vocabulary (``vocab.txt``: one ``word count`` per line) and the caption tokenizer.

Ids are line numbers.  The three special tokens come first so their ids are stable across
datasets: ``<S>`` = 0 starts every caption, ``</S>`` = 1 ends it, ``<UNK>`` = 2 stands for
any word below the builder's minimum count.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from captioning.errors import DataError

START, END, UNKNOWN = "<S>", "</S>", "<UNK>"
SPECIALS = (START, END, UNKNOWN)
_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?|[^\sa-z0-9]")


def tokenize(text: str) -> list[str]:
    """Lower-case and split words from punctuation, like im2txt (without NLTK data)."""
    return _TOKEN.findall(text.lower())


@dataclass(frozen=True)
class Vocabulary:
    words: tuple[str, ...]
    counts: tuple[int, ...]

    @property
    def start_id(self) -> int:
        return 0

    @property
    def end_id(self) -> int:
        return 1

    @property
    def unknown_id(self) -> int:
        return 2

    def __len__(self) -> int:
        return len(self.words)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {w: i for i, w in enumerate(self.words)})

    def word_to_id(self, word: str) -> int:
        return self._index.get(word, self.unknown_id)  # type: ignore[attr-defined]

    def encode(self, caption: str) -> list[int]:
        """Caption text → ids framed by ``<S>`` … ``</S>``."""
        return [self.start_id, *(self.word_to_id(w) for w in tokenize(caption)), self.end_id]

    def decode(self, ids: Iterable[int]) -> str:
        """Ids → text, dropping ``<S>`` and stopping at the first ``</S>``."""
        words = []
        for i in ids:
            i = int(i)
            if i == self.end_id:
                break
            if i == self.start_id:
                continue
            words.append(self.words[i] if 0 <= i < len(self.words) else UNKNOWN)
        return " ".join(words)

    @classmethod
    def build(cls, captions: Iterable[str], min_count: int = 1) -> Vocabulary:
        """Count tokens over (training) captions; keep words seen at least ``min_count`` times."""
        counter: collections.Counter[str] = collections.Counter()
        n = 0
        for caption in captions:
            counter.update(tokenize(caption))
            n += 1
        kept = sorted(
            ((w, c) for w, c in counter.items() if c >= min_count and w not in SPECIALS),
            key=lambda wc: (-wc[1], wc[0]),
        )
        unknown = sum(c for w, c in counter.items() if c < min_count)
        words = (START, END, UNKNOWN, *(w for w, _ in kept))
        counts = (n, n, unknown, *(c for _, c in kept))
        return cls(words, counts)

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(f"{w} {c}\n" for w, c in zip(self.words, self.counts, strict=True)))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Vocabulary:
        if not path.is_file():
            raise DataError(f"{path}: vocabulary file missing; rebuild the dataset with `showtell data`")
        words: list[str] = []
        counts: list[int] = []
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            parts = line.split()
            if len(parts) != 2 or not parts[1].isdigit():
                raise DataError(f"{path}:{lineno}: expected 'word count', got {line!r}; rebuild the dataset")
            words.append(parts[0])
            counts.append(int(parts[1]))
        if tuple(words[:3]) != SPECIALS:
            raise DataError(f"{path}: must start with {' '.join(SPECIALS)}; rebuild the dataset")
        return cls(tuple(words), tuple(counts))

    def decode_batch(self, rows: Sequence[Iterable[int]]) -> list[str]:
        return [self.decode(r) for r in rows]
