"""Every metric an evaluation reports, one small module each, registered by name (big_vision's
evaluators are found the same way): adding a metric is adding a file here.

A metric is a class: its ``name``, whether higher is better, whether it needs the JVM (METEOR),
and two functions — ``score``, which computes its value on one evaluation with the standard
implementation and each image's *sufficient statistics* (``columns``: the numbers whose sums over
images give the value back), and ``combine``, which turns summed statistics into the value.  The
bootstrap resamples images by summing their rows (``evaluator/scoring/bootstrap.py``), so every
metric with columns has an interval and a paired comparison; one without (a description of the
data, or a corpus statistic that is not a sum over images) reports its value alone.

Everything else derives from here: the scorers and the validation's figures (``evaluator/scoring``),
the history's intervals, the gRPC service's known metrics and directions, Prometheus and
TensorBoard (whatever an evaluation reports), ``showtell metrics --metric``, ``--export-best`` and
``--stop-when``.  This package imports no TensorFlow and no numpy at import (the metrics client
reads the names): a metric imports what it computes with inside ``score`` and ``combine``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

# Where a metric's rows come from: every evaluated image (the validation's loss), or the images
# with references, scored on tokenized captions (the COCO scorers).  A caption metric's columns
# restrict every column to its rows.
EVALUATED, REFERENCED = "evaluated", "referenced"


@dataclass
class Inputs:
    """One evaluation set's results, what every metric computes from.

    ``image_ids`` are the evaluated images in order; ``captions`` and ``references`` raw text;
    ``tokens`` / ``reference_tokens`` the caption scorers' tokenization (images with references
    only; None when no caption scorer runs); ``image_losses`` each image's summed word loss and
    words; ``loss`` the validation's mean word loss; ``unknown_words`` how many reference words
    the model's vocabulary lacks (None: the same vocabulary); ``unknown_references`` the images
    whose references hold <UNK>; ``meteor`` a warm METEOR scorer (None: no JVM); ``shared`` what
    metrics of one family compute once."""

    image_ids: Sequence[int]
    captions: Mapping[int, str]
    references: Mapping[int, Sequence[str]]
    image_losses: Mapping[int, tuple[float, float]] = field(default_factory=dict)
    loss: float | None = None  # the validation's mean word loss (summed in TensorFlow)
    tokens: Mapping[int, list[str]] | None = None
    reference_tokens: Mapping[int, list[str]] | None = None
    unknown_words: float | None = None
    unknown_references: frozenset[int] = frozenset()
    meteor: Any = None
    shared: dict[str, Any] = field(default_factory=dict)

    @property
    def scored_ids(self) -> list[int]:
        """The images the caption metrics score: those with tokens (references), in order."""
        return [i for i in self.image_ids if self.tokens is not None and i in self.tokens]


@dataclass
class Score:
    """A metric's value on one evaluation, and its per-image ``columns`` (rows: ``Inputs.image_ids``
    for an ``EVALUATED`` metric, ``Inputs.scored_ids`` for a ``REFERENCED`` one).  ``offset``: the
    value minus ``combine`` of the summed columns, when the standard implementation's corpus score
    is not exactly a function of them (METEOR's is its JVM's aggregate) — carried into every resample."""

    value: float
    columns: dict[str, Any] = field(default_factory=dict)
    offset: float = 0.0


class Metric:
    """One metric; subclasses set the class attributes and implement ``score`` (and ``combine``
    when they have columns)."""

    name: ClassVar[str]
    higher_is_better: ClassVar[bool] = True
    needs_jvm: ClassVar[bool] = False
    rows: ClassVar[str] = REFERENCED
    columns: ClassVar[tuple[str, ...]] = ()  # the statistics ``combine`` reads; () : no interval

    def score(self, inputs: Inputs) -> Score | None:
        """The value on ``inputs`` and each image's statistics; None: not reported here (no
        scorer ran, no JVM, nothing to describe)."""
        raise NotImplementedError

    def combine(self, sums: Mapping[str, Any], drawn: Any) -> Any:
        """The value from ``columns`` summed over drawn images (arrays, one entry per resample) and
        how many images each resample drew."""
        raise NotImplementedError(f"{self.name} has no per-image statistics")


_REGISTRY: dict[str, Metric] = {}
_FOUND: list[bool] = []  # every module imported once (a module imported alone registers only itself)


def register(cls: type[Metric]) -> type[Metric]:
    """Class decorator: the metric, by its name (a name used twice is a bug, refused at import)."""
    if cls.name in _REGISTRY:
        raise ValueError(f"metric {cls.name!r} is registered twice ({type(_REGISTRY[cls.name]).__module__} "
                         f"and {cls.__module__})")
    _REGISTRY[cls.name] = cls()
    return cls


def _discover() -> None:
    """Import every module of this package: each registers its metrics."""
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        importlib.import_module(f"{__name__}.{module.name}")


def metrics() -> Iterator[Metric]:
    """Every registered metric, in name order."""
    if not _FOUND:
        _discover()
        _FOUND.append(True)
    return iter(sorted(_REGISTRY.values(), key=lambda m: m.name))


def get(name: str) -> Metric | None:
    return next((m for m in metrics() if m.name == name), None)


def names() -> tuple[str, ...]:
    return tuple(m.name for m in metrics())


def lower_is_better() -> frozenset[str]:
    return frozenset(m.name for m in metrics() if not m.higher_is_better)


def higher_is_better(name: str) -> bool:
    """A known metric's direction; an unknown one (an older history's) counts as higher-better."""
    metric = get(name)
    return metric is None or metric.higher_is_better


def combine(sums: Mapping[str, Any], drawn: Any, offsets: Mapping[str, float]) -> dict[str, Any]:
    """Every metric whose statistics are all in ``sums``, from them (plus its offset)."""
    return {m.name: m.combine(sums, drawn) + offsets.get(m.name, 0.0)
            for m in metrics() if m.columns and all(c in sums for c in m.columns)}


def unknown_metric(name: str) -> str:
    """One line for a metric that is not registered, naming the ones that are."""
    return f"unknown metric {name!r}; the metrics are {', '.join(names())}"
