"""distinct_2: caption diversity — the share of distinct word bigrams among all the bigrams the
model generated over the set (Li et al. 2016's distinct-n, n = 2), on the scorers' tokens.  A
model that says the same few phrases for every image scores low however often they match.

Its corpus value counts bigrams shared *between* images once, so it is not a sum of per-image
statistics: no interval (the image bootstrap would need every image's set of bigrams, not a
few numbers), and it describes the captions alone, whatever the references (higher is more
varied)."""

from __future__ import annotations

from itertools import pairwise

from showtell.metrics import Inputs, Metric, Score, register


@register
class Distinct2(Metric):
    name = "distinct_2"

    def score(self, inputs: Inputs) -> Score | None:
        if inputs.tokens is None or not inputs.scored_ids:
            return None
        bigrams = [pair for i in inputs.scored_ids for pair in pairwise(inputs.tokens[i][0].split())]
        return Score(len(set(bigrams)) / len(bigrams) if bigrams else 0.0)
