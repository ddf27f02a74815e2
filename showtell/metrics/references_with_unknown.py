"""references_with_unknown: the share of evaluated images whose references hold <UNK> (the set's
own vocabulary lacked a word) — no caption can match those.  Reported only when above 0; it
describes the data and is exact for the images evaluated: no interval (lower is better)."""

from __future__ import annotations

from showtell.metrics import EVALUATED, Inputs, Metric, Score, register


@register
class ReferencesWithUnknown(Metric):
    name = "references_with_unknown"
    higher_is_better = False
    rows = EVALUATED

    def score(self, inputs: Inputs) -> Score | None:
        if not inputs.unknown_references or not inputs.captions:
            return None
        lost = sum(i in inputs.unknown_references for i in inputs.captions)
        return Score(lost / len(inputs.captions))
