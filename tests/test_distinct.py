"""distinct_2, caption diversity: the share of distinct bigrams among all those generated — a
metric added as one file (``showtell/metrics/distinct_2.py``), found and reported like the rest."""

from __future__ import annotations

import pytest

from showtell import metrics as registry
from showtell.evaluator.scoring.scorers import CaptionScorer

REFERENCES = {1: ["a red circle"], 2: ["a blue square"], 3: ["a red circle left of a square"]}


@pytest.mark.parametrize(("captions", "expected"), [
    # 6 bigrams, every one different
    ({1: "a red circle", 2: "a blue square", 3: "one green star"}, 6 / 6),
    # the same phrase for every image: 6 bigrams, 2 distinct
    ({1: "a red circle", 2: "a red circle", 3: "a red circle"}, 2 / 6),
    # an image without references is not scored; a one-word caption has no bigram
    ({1: "a red circle", 2: "square", 4: "a red circle"}, 2 / 2),
])
def test_distinct_2_counts_distinct_bigrams_over_the_set(captions, expected):
    scorer = CaptionScorer(meteor=False, tokenizer="regex")
    scored = scorer.score_images(captions, REFERENCES)
    assert scored.corpus["distinct_2"] == pytest.approx(expected)
    metric = registry.get("distinct_2")
    assert metric.higher_is_better and not metric.needs_jvm and metric.columns == ()  # no interval
    assert "distinct_2" in scorer.scoring.split("scorers=")[1].split(",")
