"""loss: the mean cross-entropy per reference word, over every caption of every evaluated image
(lower is better).  An image's statistics: its summed word loss and its words — a ratio of sums."""

from __future__ import annotations

from showtell.metrics import EVALUATED, Inputs, Metric, Score, register

LOSS_SUM, WORDS = "loss_sum", "words"


@register
class Loss(Metric):
    name = "loss"
    higher_is_better = False
    rows = EVALUATED
    columns = (LOSS_SUM, WORDS)

    def score(self, inputs: Inputs) -> Score | None:
        if inputs.loss is None:
            return None
        import numpy as np

        rows = [inputs.image_losses[i] for i in inputs.image_ids]
        table = np.asarray(rows, dtype=np.float64).reshape(len(rows), 2)
        return Score(inputs.loss, {LOSS_SUM: table[:, 0], WORDS: table[:, 1]} if rows else {})

    def combine(self, sums, drawn):
        import numpy as np

        return sums[LOSS_SUM] / np.maximum(sums[WORDS], 1.0)
