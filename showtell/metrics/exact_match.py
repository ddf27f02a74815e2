"""exact_match: the share of images whose caption equals one of its references word for word —
the synthetic scenes' clearest figure (every true caption is in the grammar).  An image's
statistic: 1 or 0."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from showtell.metrics import EVALUATED, Inputs, Metric, Score, register

EXACT = "exact"


def exact_match(predictions: Mapping[int, str], references: Mapping[int, Sequence[str]]) -> float:
    """Share of images whose caption equals one of its references word for word."""
    if not predictions:
        return 0.0
    hits = sum(1 for image_id, caption in predictions.items() if caption in references.get(image_id, ()))
    return hits / len(predictions)


@register
class ExactMatch(Metric):
    name = "exact_match"
    rows = EVALUATED
    columns = (EXACT,)

    def score(self, inputs: Inputs) -> Score | None:
        import numpy as np

        hits = [float(inputs.captions.get(i) in inputs.references.get(i, ())) for i in inputs.image_ids]
        return Score(exact_match(inputs.captions, inputs.references),
                     {EXACT: np.asarray(hits, dtype=np.float64)})

    def combine(self, sums, drawn):
        return sums[EXACT] / drawn
