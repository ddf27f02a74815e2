"""cider: pycocoevalcap's CIDEr-D, the mean over images of each caption's TF-IDF-weighted n-gram
agreement with its references.  The document frequencies are the whole evaluation's, held fixed
in every resample, as in the value; an image's statistic is its score."""

from __future__ import annotations

from showtell.metrics import Inputs, Metric, Score, register


@register
class Cider(Metric):
    name = "cider"
    columns = ("cider",)

    def score(self, inputs: Inputs) -> Score | None:
        if inputs.tokens is None or not inputs.scored_ids:
            return None
        import numpy as np
        from pycocoevalcap.cider.cider import Cider as Scorer

        ids = inputs.scored_ids
        value, per_image = Scorer().compute_score({i: inputs.reference_tokens[i] for i in ids},
                                                  {i: inputs.tokens[i] for i in ids})
        return Score(float(value), {"cider": np.asarray(per_image, dtype=np.float64)})

    def combine(self, sums, drawn):
        return sums["cider"] / drawn
