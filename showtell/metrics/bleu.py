"""bleu1 … bleu4: pycocoevalcap's corpus BLEU ("closest" reference length), one metric per n.
An image's statistics: its candidate length, the reference length closest to it, and its n-gram
guesses and matches — ``combine`` rebuilds the corpus score from their sums exactly as
``BleuScorer.compute_score`` does, its smoothing constants included."""

from __future__ import annotations

from showtell.metrics import Inputs, Metric, Score, register

TESTLEN, REFLEN = "bleu_testlen", "bleu_reflen"
GUESS = tuple(f"bleu_guess{n}" for n in range(1, 5))
CORRECT = tuple(f"bleu_correct{n}" for n in range(1, 5))
TINY, SMALL = 1e-15, 1e-9  # pycocoevalcap's smoothing


def _scored(inputs: Inputs):
    """The corpus BLEU-1..4 and every image's statistics, computed once for the four metrics."""
    if "bleu" not in inputs.shared:
        import numpy as np
        from pycocoevalcap.bleu.bleu_scorer import BleuScorer

        scorer = BleuScorer(n=4)
        for i in inputs.scored_ids:  # as pycocoevalcap's Bleu(4).compute_score, keeping the per-image counts
            scorer += (inputs.tokens[i][0], inputs.reference_tokens[i])
        corpus, _ = scorer.compute_score(option="closest", verbose=0)
        rows = [(c["testlen"], min((abs(r - c["testlen"]), r) for r in c["reflen"])[1], *c["guess"],
                 *c["correct"]) for c in scorer.ctest]
        table = np.asarray(rows, dtype=np.float64).reshape(len(rows), 10)
        columns = {k: table[:, n] for n, k in enumerate((TESTLEN, REFLEN, *GUESS, *CORRECT))}
        inputs.shared["bleu"] = ([float(b) for b in corpus], columns)
    return inputs.shared["bleu"]


class _Bleu(Metric):
    n: int

    def score(self, inputs: Inputs) -> Score | None:
        if inputs.tokens is None or not inputs.scored_ids:
            return None
        corpus, columns = _scored(inputs)
        return Score(corpus[self.n - 1], {k: columns[k] for k in self.columns})

    def combine(self, sums, drawn):
        import numpy as np

        ratio = (sums[TESTLEN] + TINY) / (sums[REFLEN] + SMALL)
        brevity = np.where(ratio < 1, np.exp(1 - 1 / np.maximum(ratio, TINY)), 1.0)
        product = 1.0
        for k in range(self.n):
            product = product * (sums[CORRECT[k]] + TINY) / (sums[GUESS[k]] + SMALL)
        return product ** (1.0 / self.n) * brevity


def _bleu(n: int) -> type[Metric]:
    return register(type(f"Bleu{n}", (_Bleu,), {
        "n": n, "name": f"bleu{n}", "columns": (TESTLEN, REFLEN, *GUESS[:n], *CORRECT[:n]),
        "__doc__": f"BLEU-{n}: the 1- to {n}-gram precisions' geometric mean × the brevity penalty."}))


Bleu1, Bleu2, Bleu3, Bleu4 = (_bleu(n) for n in range(1, 5))
