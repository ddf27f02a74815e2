"""What the loop asks of an evaluator, and what it gets back — the loop's own abstractions.

The controller and its attempts depend on these, never on how a checkpoint is scored:
``scoring.evaluation.CheckpointEvaluator`` implements ``Evaluator`` and returns ``EvalResult``
(the scoring sits above the loop; a test's fake evaluator is as good to the loop).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from showtell.api.contract import DEFAULT_SET

# How an evaluation had its encoder features (``EvalResult.costs["features"]``); the first two are
# also the kinds ``--max-eval-examples auto`` sizes apart (``sizing.py``).
REUSED, COMPUTED, EXTENDED, REBUILT, OFF = "reused", "computed", "extended", "rebuilt", "off"


class AutoSize(Protocol):
    """``--max-eval-examples auto`` for one run (``sizing.Sizer``): the size of its evaluations of a
    kind (``computed`` or ``reused`` features) if known, or the one a measured rate fits."""

    def known(self, kind: str = ...) -> int | None: ...

    def __call__(self, rate: float | None, split_images: int, batch_size: int, kind: str = ...) -> int: ...


Images = int | AutoSize | None  # ``--max-eval-examples``


class PerImage(Protocol):
    """Per-image statistics the history keeps beside a record (``scoring.bootstrap.ImageStats``)."""

    def to_bytes(self) -> bytes: ...


@dataclass
class EvalResult:
    step: int
    checkpoint: str
    metrics: dict[str, float]
    examples: int
    seconds: float
    samples: list[dict] = field(default_factory=list)
    scoring: str = ""  # the tokenizer and scorers behind the caption metrics (CaptionScorer.scoring)
    train_seconds: float | None = None  # the trainer's training seconds at this checkpoint (if it says)
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)  # metric → (lower, upper)
    bootstrap: dict = field(default_factory=dict)  # how the intervals were drawn (Bootstrap.as_dict)
    stats: PerImage | None = field(default=None, repr=False)  # per image: what the intervals resample
    eval_set: str = DEFAULT_SET
    others: list[EvalResult] = field(default_factory=list)  # the other sets' results (--eval-set)
    # Where the time went and whether the encoder's features were reused (scoring/features.py):
    # {features: reused|computed|extended|rebuilt|off, images_reused, images_computed, encoder,
    #  seconds: {restore, digest, features, decoder, scoring, intervals}}
    costs: dict = field(default_factory=lambda: {"seconds": {}})
    # ``--shard I/N``: this part's images, unscored (``records.parts.SetPart``); None: a whole evaluation
    part: Any = field(default=None, repr=False)


class Evaluator(Protocol):
    """Restores and validates one checkpoint (``scoring.evaluation.CheckpointEvaluator``)."""

    model: Any  # the model as of the last evaluation, for --export-best
    vocab: Any

    def open(self) -> None: ...

    def evaluate(self, path: str, step: int | None = None,
                 progress: Callable[[int, int], None] | None = None, images: Images = None) -> EvalResult: ...

    def merge(self, parts: Any, path: str, step: int, train_seconds: float | None) -> EvalResult: ...
