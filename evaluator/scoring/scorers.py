"""COCO caption metrics from the standard implementation (``pycocoevalcap``).

BLEU-1..4, ROUGE-L and CIDEr run in-process; METEOR runs in a Java subprocess whose JVM
takes ≈11 s to start, so one scorer is kept warm for the evaluator's lifetime.  ``COCOEvalCap``
is not used: it also runs SPICE, which downloads Stanford CoreNLP and fails offline.

Tokenization decides the scores.  Where Java runs, captions and references are tokenized the way
the COCO evaluation (and the Show-and-Tell paper's numbers) did — Stanford's PTBTokenizer from
the jar pycocoevalcap ships, lower-cased, punctuation dropped — but run here, on a temporary file
of our own: pycocoevalcap's ``PTBTokenizer`` writes its temporary file into its own package
directory, which fails on read-only installs and in non-root containers.  Without Java the
regex tokenizer (``vocab.tokenize``) stands in; its scores are not comparable with published
ones.  ``CaptionScorer.scoring`` names the tokenizer and the scorers, and every evaluation
records it.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pycocoevalcap.tokenizer import ptbtokenizer

from showtell import metrics as registry
from showtell.captioning.data.vocab import tokenize
from showtell.common.errors import ShowtellError
from showtell.evaluator.config import TOKENIZERS
from showtell.evaluator.scoring.bootstrap import ImageStats
from showtell.metrics import EVALUATED, REFERENCED, Inputs

log = logging.getLogger(__name__)

EMPTY = "<empty>"  # what an empty caption is scored as (no words cannot be scored)


def resolve_tokenizer(requested: str) -> str:
    """``auto`` → ``ptb`` where Java runs, else ``regex``; ``ptb`` without Java is refused."""
    if requested not in TOKENIZERS:
        raise ShowtellError(f"--tokenizer {requested}: choose one of {', '.join(TOKENIZERS)}")
    java = shutil.which("java") is not None
    if requested == "ptb" and not java:
        raise ShowtellError("--tokenizer ptb needs Java (`java` on PATH): install a JRE (Debian: "
                            "default-jre-headless) or use --tokenizer regex")
    return "ptb" if java and requested != "regex" else "regex"


def ptb_tokenize(sentences: Sequence[str]) -> list[str]:
    """PTB-tokenize ``sentences`` exactly as pycocoevalcap's ``PTBTokenizer`` (same jar, class,
    flags and punctuation list), reading a temporary file outside the package directory."""
    jar = Path(ptbtokenizer.__file__).with_name(ptbtokenizer.STANFORD_CORENLP_3_4_1_JAR)
    with tempfile.TemporaryDirectory(prefix="showtell-ptb-") as tmp:
        source = Path(tmp) / "sentences.txt"
        source.write_bytes("\n".join(s.replace("\n", " ") for s in sentences).encode())
        done = subprocess.run(["java", "-cp", str(jar), "edu.stanford.nlp.process.PTBTokenizer",
                               "-preserveLines", "-lowerCase", str(source)],
                              cwd=tmp, capture_output=True, check=False)
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip()[-300:]
        raise RuntimeError(f"PTBTokenizer ({jar}) failed: {why}")
    lines = done.stdout.decode().split("\n")
    if len(lines) < len(sentences):
        raise RuntimeError(f"PTBTokenizer returned {len(lines)} lines for {len(sentences)} sentences")
    drop = set(ptbtokenizer.PUNCTUATIONS)
    return [" ".join(w for w in line.rstrip().split(" ") if w not in drop) for line in lines[:len(sentences)]]


@dataclass(frozen=True)
class ImageScores:
    """``corpus``: the scores; ``columns``: per image of ``image_ids`` (in order), what they are
    made of (each metric's statistics, ``showtell/metrics/``); ``offsets``: see ``ImageStats``."""

    corpus: dict[str, float]
    image_ids: list[int]
    columns: dict[str, np.ndarray]
    offsets: dict[str, float] = field(default_factory=dict)


def score(inputs: Inputs, rows: str | None = None) -> tuple[dict[str, float], ImageStats]:
    """Every registered metric (``rows``: those of one kind) on one evaluation set: the values,
    and the per-image statistics the bootstrap resamples.  A caption metric's rows (images with
    references) restrict every column, so all have the same rows."""
    values, evaluated, referenced, offsets = {}, {}, {}, {}
    for metric in registry.metrics():
        got = metric.score(inputs) if rows in (None, metric.rows) else None
        if got is None:
            continue
        values[metric.name] = got.value
        (evaluated if metric.rows == EVALUATED else referenced).update(got.columns)
        if got.offset:
            offsets[metric.name] = got.offset
    ids = np.asarray(list(inputs.image_ids), dtype=np.int64)
    columns = evaluated
    if referenced:
        where = {int(i): n for n, i in enumerate(inputs.image_ids)}
        keep = np.asarray([where[i] for i in inputs.scored_ids], dtype=np.int64)
        ids = ids[keep]
        columns = {k: np.asarray(v)[keep] for k, v in evaluated.items()} | referenced
    return values, ImageStats(ids, {k: np.asarray(v, dtype=np.float64) for k, v in columns.items()}, offsets)


class CaptionScorer:
    """BLEU-1..4, ROUGE-L, CIDEr (and METEOR) of generated captions against references.

    ``tokenizer``: ``ptb`` (needs ``java``), ``regex``, or ``auto`` — PTB where Java runs.
    References are tokenized once and remembered (the same every checkpoint); generated captions
    are tokenized at every evaluation, as a model that learns writes new ones each time — one
    tokenizer run (a JVM, ≈ 0.2 CPU-s, plus ≈ 0.03 per 1,000 captions here) per evaluation.
    """

    def __init__(self, meteor: bool = True, tokenizer: str = "auto") -> None:
        self.tokenizer = resolve_tokenizer(tokenizer)
        java = self.tokenizer == "ptb" or shutil.which("java") is not None
        if tokenizer == "auto" and not java:
            log.warning("no java on PATH: captions are tokenized by a regex, not COCO's PTB tokenizer — "
                        "scores are not comparable with published ones; METEOR is not computed")
        self._meteor = None
        self._references: dict[str, str] = {}  # reference → its tokens
        if meteor and java:
            from pycocoevalcap.meteor.meteor import Meteor

            self._meteor = Meteor()

    @property
    def scoring(self) -> str:
        """Which tokenizer and scorers produce the scores, e.g. ``tokenizer=ptb scorers=bleu1,…``:
        every registered caption metric this scorer can run."""
        scorers = [m.name for m in registry.metrics()
                   if m.rows == REFERENCED and (self._meteor is not None or not m.needs_jvm)]
        return f"tokenizer={self.tokenizer} scorers={','.join(scorers)}"

    def _tokenized(self, captions: Sequence[str], references: Sequence[str]) -> tuple[list[str], list[str]]:
        """The captions' tokens and the references' — one tokenizer run for the captions and any
        reference not seen before."""
        if self.tokenizer == "regex":  # punctuation dropped, as after the PTB tokenizer
            drop = set(ptbtokenizer.PUNCTUATIONS)
            words = [" ".join(w for w in tokenize(t) if w not in drop) for t in (*captions, *references)]
            return words[:len(captions)], words[len(captions):]
        new = sorted({t for t in references if t not in self._references})
        tokens = ptb_tokenize([*captions, *new])
        self._references.update(zip(new, tokens[len(captions):], strict=True))
        return tokens[:len(captions)], [self._references[t] for t in references]

    def prepare(self, inputs: Inputs) -> Inputs:
        """``inputs`` with the caption metrics' tokens (images with references; an empty caption
        scored as ``<empty>``) and the warm METEOR scorer."""
        ids = [i for i in inputs.image_ids if inputs.references.get(i) and i in inputs.captions]
        captions, refs = self._tokenized([inputs.captions[i] for i in ids],
                                         [r for i in ids for r in inputs.references[i]])
        left = iter(refs)
        inputs.tokens = {i: [caption or EMPTY] for i, caption in zip(ids, captions, strict=True)}
        inputs.reference_tokens = {i: [next(left) for _ in inputs.references[i]] for i in ids}
        inputs.meteor = self._meteor
        return inputs

    def score(self, predictions: Mapping[int, str], references: Mapping[int, Sequence[str]]
              ) -> dict[str, float]:
        """Corpus-level scores of one caption per image against all its references."""
        return self.score_images(predictions, references).corpus

    def score_images(self, predictions: Mapping[int, str], references: Mapping[int, Sequence[str]]
                     ) -> ImageScores:
        """The caption metrics' corpus scores, and each image's share of them (what a bootstrap
        resamples)."""
        inputs = self.prepare(Inputs(list(predictions), predictions, references))
        values, stats = score(inputs, REFERENCED)
        return ImageScores(values, stats.image_ids.tolist(), dict(stats.columns), dict(stats.offsets))

    def close(self) -> None:
        """Stop METEOR's JVM (pycocoevalcap only does so in ``__del__``)."""
        if self._meteor is not None:
            process = self._meteor.meteor_p
            process.stdin.close()
            process.kill()
            process.wait()
            self._meteor = None
