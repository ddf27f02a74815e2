"""unknown_reference_words: how many reference words the model's vocabulary lacks (scored as
<UNK>), reported only when the data's vocabulary and the model's differ.  It describes the data,
not the captions, and is exact for the images evaluated: no interval (lower is better)."""

from __future__ import annotations

from showtell.metrics import EVALUATED, Inputs, Metric, Score, register


@register
class UnknownReferenceWords(Metric):
    name = "unknown_reference_words"
    higher_is_better = False
    rows = EVALUATED

    def score(self, inputs: Inputs) -> Score | None:
        return None if inputs.unknown_words is None else Score(float(inputs.unknown_words))
