"""The metrics an evaluation can report, named once: the code that computes each one, the
service that validates ``GetBest(metric=…)`` and the best-export rule all read them here."""

from __future__ import annotations

LOSS, PERPLEXITY, EXACT_MATCH = "loss", "perplexity", "exact_match"
UNKNOWN_REFERENCE_WORDS = "unknown_reference_words"  # only when data and model vocabularies differ
BLEU = tuple(f"bleu{n}" for n in range(1, 5))
ROUGE_L, CIDER, METEOR = "rouge_l", "cider", "meteor"  # METEOR only where Java runs

ALL = frozenset({LOSS, PERPLEXITY, EXACT_MATCH, UNKNOWN_REFERENCE_WORDS, *BLEU, ROUGE_L, CIDER, METEOR})
LOWER_IS_BETTER = frozenset({LOSS, PERPLEXITY, UNKNOWN_REFERENCE_WORDS})  # the others: higher is better
