"""meteor: METEOR 1.5 from pycocoevalcap's jar, where Java runs (its JVM kept warm by the
scorer).  Its corpus score is the JVM's aggregate of fragment statistics, which no sum over images
reproduces: an image's statistic is its own METEOR, and the corpus score's difference from their
mean is carried as an offset into every resample — the interval is approximate, the value exact."""

from __future__ import annotations

import threading

from showtell.metrics import Inputs, Metric, Score, register

_LOCK = threading.Lock()  # one JVM, one conversation at a time


@register
class Meteor(Metric):
    name = "meteor"
    needs_jvm = True
    columns = ("meteor",)

    def score(self, inputs: Inputs) -> Score | None:
        if inputs.meteor is None or inputs.tokens is None or not inputs.scored_ids:
            return None
        import numpy as np

        ids = inputs.scored_ids
        with _LOCK:
            value, per_image = inputs.meteor.compute_score({i: inputs.reference_tokens[i] for i in ids},
                                                           {i: inputs.tokens[i] for i in ids})
        column = np.asarray(per_image, dtype=np.float64)
        return Score(float(value), {"meteor": column}, offset=float(value) - float(np.mean(column)))

    def combine(self, sums, drawn):
        return sums["meteor"] / drawn
