"""COCO caption metrics from the standard implementation (``pycocoevalcap``).

BLEU-1..4, ROUGE-L and CIDEr run in-process; METEOR runs in a Java subprocess whose JVM
takes ≈11 s to start, so one scorer is kept warm for the evaluator's lifetime (and
skipped, with a log line, where no ``java`` is installed).  ``COCOEvalCap`` is not used: it
also runs SPICE, which downloads Stanford CoreNLP and fails offline.  Captions are already
tokenized by ``showtell.captioning.data.vocab.tokenize`` (lower-case, punctuation split), which stands in
for PTBTokenizer (also Java).
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Mapping, Sequence

from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.rouge.rouge import Rouge

from showtell.captioning.data.vocab import tokenize
from showtell.evaluator import metric_names as names

log = logging.getLogger(__name__)


def _normalise(text: str) -> str:
    return " ".join(tokenize(text))


class CaptionScorer:
    def __init__(self, meteor: bool = True) -> None:
        self._meteor = None
        self._lock = threading.Lock()
        if meteor and shutil.which("java"):
            from pycocoevalcap.meteor.meteor import Meteor

            self._meteor = Meteor()
        elif meteor:
            log.info("no java on PATH: METEOR is not computed")

    def score(self, predictions: Mapping[int, str], references: Mapping[int, Sequence[str]]
              ) -> dict[str, float]:
        """Corpus-level scores of one caption per image against all its references."""
        ids = [i for i in predictions if references.get(i)]
        if not ids:
            return {}
        res = {i: [_normalise(predictions[i]) or "<empty>"] for i in ids}
        gts = {i: [_normalise(r) for r in references[i]] for i in ids}
        bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
        scores = {name: float(b) for name, b in zip(names.BLEU, bleu, strict=True)}
        scores[names.ROUGE_L] = float(Rouge().compute_score(gts, res)[0])
        scores[names.CIDER] = float(Cider().compute_score(gts, res)[0])
        if self._meteor is not None:
            with self._lock:
                scores[names.METEOR] = float(self._meteor.compute_score(gts, res)[0])
        return scores

    def close(self) -> None:
        """Stop METEOR's JVM (pycocoevalcap only does so in ``__del__``)."""
        if self._meteor is not None:
            process = self._meteor.meteor_p
            process.stdin.close()
            process.kill()
            process.wait()
            self._meteor = None
