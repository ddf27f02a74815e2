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
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pycocoevalcap.bleu.bleu_scorer import BleuScorer
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.rouge.rouge import Rouge
from pycocoevalcap.tokenizer import ptbtokenizer

from showtell.captioning.data.vocab import tokenize
from showtell.common.errors import ShowtellError
from showtell.evaluator import metric_names as names
from showtell.evaluator.config import TOKENIZERS
from showtell.evaluator.scoring import bootstrap

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
    made of (``evaluator/scoring/bootstrap.py`` names them)."""

    corpus: dict[str, float]
    image_ids: list[int]
    columns: dict[str, np.ndarray]
    meteor_offset: float = 0.0


def _bleu_columns(scorer: BleuScorer) -> dict[str, np.ndarray]:
    """Each image's BLEU statistics from a scored ``BleuScorer``: candidate length, the reference
    length closest to it (the ``closest`` option pycocoevalcap's Bleu uses), n-gram guesses and matches."""
    rows = [(c["testlen"], min((abs(r - c["testlen"]), r) for r in c["reflen"])[1], *c["guess"],
             *c["correct"]) for c in scorer.ctest]
    table = np.asarray(rows, dtype=np.float64).reshape(len(rows), 10)
    keys = (bootstrap.BLEU_TESTLEN, bootstrap.BLEU_REFLEN, *bootstrap.BLEU_GUESS, *bootstrap.BLEU_CORRECT)
    return {k: table[:, n] for n, k in enumerate(keys)}


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
        self._lock = threading.Lock()
        self._references: dict[str, str] = {}  # reference → its tokens
        if meteor and java:
            from pycocoevalcap.meteor.meteor import Meteor

            self._meteor = Meteor()

    @property
    def scoring(self) -> str:
        """Which tokenizer and scorers produce the scores, e.g. ``tokenizer=ptb scorers=bleu,…``."""
        scorers = ["bleu", names.ROUGE_L, names.CIDER] + ([names.METEOR] if self._meteor else [])
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

    def score(self, predictions: Mapping[int, str], references: Mapping[int, Sequence[str]]
              ) -> dict[str, float]:
        """Corpus-level scores of one caption per image against all its references."""
        return self.score_images(predictions, references).corpus

    def score_images(self, predictions: Mapping[int, str], references: Mapping[int, Sequence[str]]
                     ) -> ImageScores:
        """Corpus-level scores, and each image's share of them (what a bootstrap resamples)."""
        ids = [i for i in predictions if references.get(i)]
        if not ids:
            return ImageScores({}, ids, {})
        captions, refs = self._tokenized([predictions[i] for i in ids],
                                         [r for i in ids for r in references[i]])
        res = {i: [caption or EMPTY] for i, caption in zip(ids, captions, strict=True)}
        refs_left = iter(refs)
        gts = {i: [next(refs_left) for _ in references[i]] for i in ids}
        bleu = BleuScorer(n=4)
        for i in ids:  # as pycocoevalcap's Bleu(4).compute_score, keeping the scorer's per-image counts
            bleu += (res[i][0], gts[i])
        corpus, _ = bleu.compute_score(option="closest", verbose=0)
        scores = {name: float(b) for name, b in zip(names.BLEU, corpus, strict=True)}
        columns = _bleu_columns(bleu)
        rouge, columns[names.ROUGE_L] = Rouge().compute_score(gts, res)
        cider, columns[names.CIDER] = Cider().compute_score(gts, res)
        scores[names.ROUGE_L], scores[names.CIDER] = float(rouge), float(cider)
        offset = 0.0
        if self._meteor is not None:
            with self._lock:
                meteor, per_image = self._meteor.compute_score(gts, res)
            scores[names.METEOR], columns[names.METEOR] = float(meteor), np.asarray(per_image)
            offset = float(meteor) - float(np.mean(per_image))
        return ImageScores(scores, ids, {k: np.asarray(v, dtype=np.float64) for k, v in columns.items()},
                           meteor_offset=offset)

    def close(self) -> None:
        """Stop METEOR's JVM (pycocoevalcap only does so in ``__del__``)."""
        if self._meteor is not None:
            process = self._meteor.meteor_p
            process.stdin.close()
            process.kill()
            process.wait()
            self._meteor = None
