"""rouge_l: pycocoevalcap's ROUGE-L (longest common subsequence F-measure, β = 1.2), the mean
over images of each caption's score against its references — an image's statistic is its score."""

from __future__ import annotations

from showtell.metrics import Inputs, Metric, Score, register


@register
class RougeL(Metric):
    name = "rouge_l"
    columns = ("rouge_l",)

    def score(self, inputs: Inputs) -> Score | None:
        if inputs.tokens is None or not inputs.scored_ids:
            return None
        import numpy as np
        from pycocoevalcap.rouge.rouge import Rouge

        ids = inputs.scored_ids
        value, per_image = Rouge().compute_score({i: inputs.reference_tokens[i] for i in ids},
                                                 {i: inputs.tokens[i] for i in ids})
        return Score(float(value), {"rouge_l": np.asarray(per_image, dtype=np.float64)})

    def combine(self, sums, drawn):
        return sums["rouge_l"] / drawn
