"""The metrics an evaluation can report, named once: the code that computes each one, the
service that validates ``GetBest(metric=…)`` and the best-export rule all read them here."""

from __future__ import annotations

LOSS, PERPLEXITY, EXACT_MATCH = "loss", "perplexity", "exact_match"
UNKNOWN_REFERENCE_WORDS = "unknown_reference_words"  # only when data and model vocabularies differ
# The share of evaluated images whose references hold <UNK> (the set's own vocabulary lacked a
# word): no caption can match those.  Only when above 0.  Neither has an interval: both describe
# the data, not the model's captions, and are exact for the images evaluated.
REFERENCES_WITH_UNKNOWN = "references_with_unknown"
BLEU = tuple(f"bleu{n}" for n in range(1, 5))
ROUGE_L, CIDER, METEOR = "rouge_l", "cider", "meteor"  # METEOR only where Java runs

ALL = frozenset({LOSS, PERPLEXITY, EXACT_MATCH, UNKNOWN_REFERENCE_WORDS, REFERENCES_WITH_UNKNOWN, *BLEU,
                 ROUGE_L, CIDER, METEOR})
LOWER_IS_BETTER = frozenset({LOSS, PERPLEXITY, UNKNOWN_REFERENCE_WORDS,
                             REFERENCES_WITH_UNKNOWN})  # the others: higher is better
