"""Confidence intervals and paired comparisons by bootstrap over images.

An evaluation on a few hundred images moves by several points between neighbouring checkpoints
from which images happen to be easy; a point value cannot say whether a difference is more than
that.  Resampling the *images* (with replacement, ``samples`` times) and recomputing each metric
gives its spread; resampling the same images for two evaluations gives the spread of their
difference (Koehn 2004's paired bootstrap, sacreBLEU's ``--paired-bs``).

Nothing is re-scored: every metric with an interval is a function of per-image sufficient
statistics summed over the images (``ImageStats``), so a resample is a weighted sum — a matrix
product of resample counts [samples × images] with the statistics [images × columns], which each
metric's own ``combine`` turns into its value (``showtell/metrics/``: loss and perplexity a ratio
of sums, BLEU its corpus formula, the means their sums over the draws, METEOR shifted by its
corpus score's offset from their mean).

Intervals are percentile intervals; a comparison's p-value is the share of resampled differences,
centred on their mean, at least as far from 0 as the observed one (two-sided; +1 smoothed).  The
resample counts come from a seeded generator, so a record's interval can be recomputed.
"""

from __future__ import annotations

import io
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from showtell import metrics as registry

log = logging.getLogger(__name__)

DEFAULT_SAMPLES = 1000
DEFAULT_CONFIDENCE = 0.95
DEFAULT_SEED = 0
CHUNK = 250  # resamples built at once: [CHUNK × images] counts stay ~10 MB at 5,000 images



@dataclass(frozen=True)
class Bootstrap:
    """How intervals are drawn: ``samples`` resamples, ``confidence`` two-sided, ``seed``."""

    samples: int = DEFAULT_SAMPLES
    confidence: float = DEFAULT_CONFIDENCE
    seed: int = DEFAULT_SEED

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError(f"bootstrap samples {self.samples}: must be ≥ 1")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"confidence {self.confidence}: must be between 0 and 1")

    def as_dict(self) -> dict:
        return {"samples": self.samples, "confidence": self.confidence, "seed": self.seed}


@dataclass(frozen=True)
class ImageStats:
    """One evaluation's sufficient statistics, one row per image (``image_ids`` in order)."""

    image_ids: np.ndarray  # int64 [images]
    columns: Mapping[str, np.ndarray] = field(default_factory=dict)  # float64 [images] each
    # a metric's value minus ``combine`` of its summed columns, where the standard corpus score is
    # not a function of them (METEOR's), carried into every resample
    offsets: Mapping[str, float] = field(default_factory=dict)
    # The evaluated set's images and references, digested (``evaluation.set_fingerprint``): two
    # sets whose ids agree but whose images differ are not paired.  Empty: recorded before it was.
    fingerprint: str = ""

    def __len__(self) -> int:
        return len(self.image_ids)

    def metrics(self, counts: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Every metric these statistics give, once per row of ``counts`` ([resamples × images]:
        how often each image is drawn); without ``counts``, the evaluation itself (one row)."""
        keys = sorted(self.columns)
        table = np.stack([np.asarray(self.columns[k], dtype=np.float64) for k in keys], axis=1)
        if counts is None:
            counts = np.ones((1, len(self)))
        sums = dict(zip(keys, (counts @ table).T, strict=True))
        return registry.combine(sums, counts.sum(axis=1), self.offsets)

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        np.savez_compressed(buffer, image_ids=self.image_ids, fingerprint=np.str_(self.fingerprint),
                            **{f"offset_{k}": np.float64(v) for k, v in self.offsets.items()},
                            **{f"column_{k}": v for k, v in self.columns.items()})
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> ImageStats:
        with np.load(io.BytesIO(data)) as saved:
            columns = {k.removeprefix("column_"): saved[k] for k in saved.files if k.startswith("column_")}
            offsets = {k.removeprefix("offset_"): float(saved[k]) for k in saved.files
                       if k.startswith("offset_")}
            if "meteor_offset" in saved.files and float(saved["meteor_offset"]):  # before offsets were kept
                offsets["meteor"] = float(saved["meteor_offset"])
            fingerprint = str(saved["fingerprint"]) if "fingerprint" in saved.files else ""
            return cls(image_ids=saved["image_ids"], offsets=offsets, columns=columns,
                       fingerprint=fingerprint)


def resample_counts(images: int, bootstrap: Bootstrap) -> np.ndarray:
    """[samples × images]: how often each image is drawn in each resample (each row sums to
    ``images``) — the same for the same size and seed, so two evaluations of the same images share
    them (pairing) and a record's interval can be drawn again."""
    rng = np.random.default_rng(bootstrap.seed)
    rows = []
    for start in range(0, bootstrap.samples, CHUNK):
        size = min(CHUNK, bootstrap.samples - start)
        drawn = rng.integers(0, images, size=(size, images))
        flat = (drawn + images * np.arange(size)[:, None]).ravel()
        rows.append(np.bincount(flat, minlength=size * images).reshape(size, images).astype(np.float64))
    return np.concatenate(rows)


def _bounds(values: np.ndarray, confidence: float) -> tuple[float, float]:
    alpha = 1.0 - confidence
    lower, upper = np.quantile(values, [alpha / 2, 1 - alpha / 2])
    return float(lower), float(upper)


def intervals(stats: ImageStats, bootstrap: Bootstrap) -> dict[str, tuple[float, float]]:
    """Each metric's percentile interval over ``bootstrap.samples`` resamples of the images."""
    if len(stats) == 0:
        return {}
    drawn = _resampled(stats, resample_counts(len(stats), bootstrap))
    return {name: _bounds(values, bootstrap.confidence) for name, values in drawn.items()
            if np.all(np.isfinite(values))}


def _resampled(stats: ImageStats, counts: np.ndarray) -> dict[str, np.ndarray]:
    out: dict[str, list[np.ndarray]] = {}
    for start in range(0, len(counts), CHUNK):
        for name, values in stats.metrics(counts[start:start + CHUNK]).items():
            out.setdefault(name, []).append(values)
    return {name: np.concatenate(parts) for name, parts in out.items()}


@dataclass(frozen=True)
class Comparison:
    """B − A of one metric on the same images: the difference, its interval and p-value."""

    metric: str
    a: float
    b: float
    difference: float
    lower: float
    upper: float
    p_value: float

    @property
    def significant(self) -> bool:
        """The interval excludes 0."""
        return self.lower > 0 or self.upper < 0


class NotPaired(ValueError):
    """The two evaluations were not of the same images."""


def compare(a: ImageStats, b: ImageStats,
            bootstrap: Bootstrap) -> tuple[list[Comparison], dict[str, str]]:
    """Every metric both evaluations have per-image statistics of, B − A, by paired bootstrap: each
    resample draws the same images for both; and those left out, with why (a difference that is not
    finite).  Raises ``NotPaired`` unless both scored the same images."""
    if len(a) != len(b) or not np.array_equal(np.sort(a.image_ids), np.sort(b.image_ids)):
        raise NotPaired(f"not the same images ({len(a)} and {len(b)} evaluated"
                        + (", different ones)" if len(a) == len(b) else ")"))
    if a.fingerprint and b.fingerprint and a.fingerprint != b.fingerprint:
        raise NotPaired(f"not the same images ({len(a)} with the same ids, but of different sets: other "
                        f"images or references, set fingerprints {a.fingerprint[:12]} and "
                        f"{b.fingerprint[:12]})")
    b = _aligned(b, a.image_ids)
    counts = resample_counts(len(a), bootstrap)
    point_a, point_b = a.metrics(), b.metrics()
    drawn_a, drawn_b = _resampled(a, counts), _resampled(b, counts)
    found, left_out = [], {}
    for name in sorted(set(point_a) & set(point_b)):
        observed = float(point_b[name][0] - point_a[name][0])
        deltas = drawn_b[name] - drawn_a[name]
        if not (math.isfinite(observed) and np.all(np.isfinite(deltas))):
            left_out[name] = (f"its difference is not finite (A {float(point_a[name][0]):g}, "
                              f"B {float(point_b[name][0]):g})" if not math.isfinite(observed) else
                              "a resample's difference is not finite")
            continue
        lower, upper = _bounds(deltas, bootstrap.confidence)
        centred = np.abs(deltas - deltas.mean())
        p_value = (int(np.sum(centred >= abs(observed) - 1e-12)) + 1) / (len(deltas) + 1)
        found.append(Comparison(name, float(point_a[name][0]), float(point_b[name][0]), observed,
                                lower, upper, p_value))
    return found, left_out


def _aligned(stats: ImageStats, order: np.ndarray) -> ImageStats:
    """``stats`` with its rows in ``order``'s image order."""
    if np.array_equal(stats.image_ids, order):
        return stats
    where = {int(i): row for row, i in enumerate(stats.image_ids)}
    rows = np.array([where[int(i)] for i in order])
    return ImageStats(image_ids=stats.image_ids[rows], offsets=stats.offsets,
                      columns={k: np.asarray(v)[rows] for k, v in stats.columns.items()},
                      fingerprint=stats.fingerprint)


def export_judge(stats_of: Callable[[str | None, int, str], bytes | None], metric: str, maximize: bool,
                 drawn: Bootstrap) -> Callable[[dict, object], str]:
    """``--export-best-when significant``'s test for ``BestExport``: ``(export's info, record)`` →
    why the record does not beat the export beyond noise, empty when it does (the paired interval
    of the difference on ``metric`` excludes 0 in the better direction).  ``stats_of(run, step,
    checkpoint)``: an evaluation's stored per-image statistics."""
    def judge(info: dict, record) -> str:
        exported = stats_of(info.get("run"), info["step"], info["checkpoint"])
        new = stats_of(record.run, record.step, record.checkpoint)
        if exported is None:  # it never can be compared: waiting would keep it for ever
            log.warning("--export-best-when significant: the export (step %d) has no per-image "
                        "statistics to test against (evaluated before they were kept, or its history "
                        "is gone), so step %d replaces it on its value alone; later exports are tested",
                        info["step"], record.step)
            return ""
        if new is None:
            return "the new evaluation has no per-image statistics"
        try:
            compared, _ = compare(ImageStats.from_bytes(exported), ImageStats.from_bytes(new), drawn)
            found = {c.metric: c for c in compared}
        except NotPaired as exc:
            return f"the two were {exc}"
        gain = found.get(metric)
        if gain is None:
            return f"{metric} has no interval"
        if gain.lower > 0 if maximize else gain.upper < 0:
            return ""
        return (f"the {drawn.confidence * 100:g} % interval of the difference ({gain.lower:+.6g}…"
                f"{gain.upper:+.6g}) includes 0")

    return judge

