"""Vocabulary (``vocab.txt``: one ``word count`` per line) and the caption tokenizer.

Ids are line numbers.  The three special tokens come first so their ids are stable across
datasets: ``<S>`` = 0 starts every caption, ``</S>`` = 1 ends it, ``<UNK>`` = 2 stands for
any word below the builder's minimum count.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from showtell.common.errors import DataError
from showtell.common.files import write_atomic

VOCAB = "vocab.txt"  # a dataset's vocabulary file (a model dir's copy: ``ModelDir.VOCAB``)

START, END, UNKNOWN = "<S>", "</S>", "<UNK>"
SPECIALS = (START, END, UNKNOWN)
START_ID, END_ID, UNKNOWN_ID = range(len(SPECIALS))  # the same in every vocabulary
UNUSED = "<unused-"  # an imported im2txt model's rows that no word owns: "<unused-N>"
_BYTES_WORD = re.compile(r"^b(['\"])(.*)\1$")  # im2txt under Python 3 wrote words as b'word'
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
        return START_ID

    @property
    def end_id(self) -> int:
        return END_ID

    @property
    def unknown_id(self) -> int:
        return UNKNOWN_ID

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
        write_atomic(path, "".join(f"{w} {c}\n" for w, c in zip(self.words, self.counts, strict=True)))

    @classmethod
    def load(cls, path: Path) -> Vocabulary:
        if not path.is_file():
            raise DataError(f"{path}: vocabulary file missing; rebuild the dataset with `showtell data`")
        return cls.parse(path.read_text(), str(path))

    @classmethod
    def parse(cls, text: str, source: str) -> Vocabulary:
        """``vocab.txt`` contents → vocabulary; ``source`` names the file in errors."""
        words: list[str] = []
        counts: list[int] = []
        for lineno, line in enumerate(text.splitlines(), 1):
            parts = line.split()
            if len(parts) != 2 or not parts[1].isdigit():
                raise DataError(f"{source}:{lineno}: expected 'word count', got {line!r}; "
                                "rebuild the dataset")
            words.append(parts[0])
            counts.append(int(parts[1]))
        if tuple(words[:3]) != SPECIALS:
            raise DataError(f"{source}: must start with {' '.join(SPECIALS)}; rebuild the dataset")
        return cls(tuple(words), tuple(counts))

    def id_map(self, target: Vocabulary) -> tuple[list[int], list[str]]:
        """For each of our ids, the id of the same word in ``target`` (``<UNK>`` where it has none),
        and the words ``target`` lacks — to re-encode captions for a model trained on ``target``."""
        mapping = [target.word_to_id(word) for word in self.words]
        missing = [word for word, i in zip(self.words, mapping, strict=True)
                   if i == target.unknown_id and word != UNKNOWN]
        return mapping, missing


def read_word_counts(path: Path, flag: str) -> list[tuple[str, int]]:
    """im2txt's ``word_counts.txt``: ``word count`` per line, its ids in file order."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DataError(f"{flag} {path}: cannot read it ({exc.strerror})") from exc
    entries = []
    for number, line in enumerate(lines, 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or not parts[1].isdigit():
            raise DataError(f"{flag} {path}: line {number} is not 'word count' ({line[:60]!r}); "
                            "pass im2txt's word_counts.txt")
        match = _BYTES_WORD.match(parts[0])
        entries.append((match.group(2) if match else parts[0], int(parts[1])))
    words = [w for w, _ in entries]
    for needed in (START, END):
        if needed not in words:
            raise DataError(f"{flag} {path}: no {needed} line; pass im2txt's word_counts.txt")
    return entries


def from_word_counts(entries: list[tuple[str, int]]) -> Vocabulary:
    """im2txt's words as a showtell vocabulary: the specials first, then its words in its order
    (im2txt puts ``<UNK>`` after its last word) — what ``import-im2txt`` gives the model, less the
    rows no word owns."""
    counts = dict(entries)
    rest = [(w, c) for w, c in entries if w not in SPECIALS]
    return Vocabulary((*SPECIALS, *(w for w, _ in rest)),
                      (counts.get(START, 0), counts.get(END, 0), 0, *(c for _, c in rest)))


def read_vocabulary(path: Path, flag: str) -> Vocabulary:
    """A model's vocabulary to build data in: showtell's ``vocab.txt`` (a model dir's own, as
    ``import-im2txt`` or the trainer writes it) or im2txt's ``word_counts.txt``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DataError(f"{flag} {path}: cannot read it ({exc.strerror}); pass a vocab.txt or "
                        "im2txt's word_counts.txt") from exc
    if text.split()[:1] == [START] and text.split()[2:3] == [END]:
        return Vocabulary.parse(text, f"{flag} {path}")
    return from_word_counts(read_word_counts(path, flag))


def same_ids(data: Vocabulary, model: Vocabulary) -> bool:
    """True when captions encoded with ``data`` mean the same to ``model``: the same words in
    the same order, the model's extra rows being ones no word owns (an imported im2txt's)."""
    extra = model.words[len(data):]
    return model.words[:len(data)] == data.words and all(w.startswith(UNUSED) for w in extra)


def first_difference(a: Vocabulary, b: Vocabulary) -> str:
    """Where two vocabularies part, for a one-line error ('' when identical)."""
    for i, (x, y) in enumerate(zip(a.words, b.words, strict=False)):
        if x != y:
            return f"id {i} is {x!r} in one and {y!r} in the other"
    if len(a) != len(b):
        return f"one has {len(a)} words, the other {len(b)}"
    return ""
