"""perplexity: exp of the mean word loss — ``loss``'s value and statistics, read through the
registry (lower is better)."""

from __future__ import annotations

from showtell.metrics import EVALUATED, Inputs, Metric, Score, get, register


@register
class Perplexity(Metric):
    name = "perplexity"
    higher_is_better = False
    rows = EVALUATED
    columns = ("loss_sum", "words")  # the loss's

    def score(self, inputs: Inputs) -> Score | None:
        loss = get("loss").score(inputs)
        if loss is None:
            return None
        import math

        return Score(math.exp(min(loss.value, 50.0)), loss.columns)

    def combine(self, sums, drawn):
        import numpy as np

        return np.exp(np.minimum(get("loss").combine(sums, drawn), 50.0))
