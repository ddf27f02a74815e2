"""Intervals and paired comparisons by bootstrap over images (``evaluator/scoring/bootstrap.py``):
right on data whose answer is known, in-process (numpy only)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from showtell.evaluator.scoring import bootstrap
from showtell.evaluator.scoring.bootstrap import Bootstrap, ImageStats, NotPaired, compare, intervals
from showtell.metrics.exact_match import EXACT
from showtell.metrics.loss import LOSS_SUM, WORDS


def _exact(values) -> ImageStats:
    values = np.asarray(values, dtype=np.float64)
    return ImageStats(np.arange(len(values)), {EXACT: values})


def test_the_interval_is_the_textbook_percentile_bootstrap_of_a_mean():
    """scipy is not installed here, so the reference is Efron's percentile bootstrap written out:
    draw images with replacement, take the mean, take the quantiles."""
    values = np.random.default_rng(5).random(37)
    drawn = Bootstrap(samples=600, confidence=0.9, seed=11)
    rng = np.random.default_rng(11)
    means = values[rng.integers(0, 37, size=(600, 37))].mean(axis=1)
    expected = np.quantile(means, [0.05, 0.95])
    stats = ImageStats(np.arange(37), {"rouge_l": values})
    assert intervals(stats, drawn)["rouge_l"] == pytest.approx(tuple(expected), rel=1e-12)
    # the same seed, the same interval (a record can be recomputed); another seed, another
    assert intervals(stats, drawn) == intervals(stats, drawn)
    assert intervals(stats, Bootstrap(600, 0.9, seed=12)) != intervals(stats, drawn)


def test_a_hand_checked_case():
    """Two images, one right: a resample's mean is 0, ½ or 1 with chances ¼, ½, ¼ — so the 95 %
    interval is [0, 1] and the 40 % one (quantiles 0.3 and 0.7) is [½, ½]."""
    stats = _exact([0.0, 1.0])
    assert intervals(stats, Bootstrap(4000, 0.95))["exact_match"] == (0.0, 1.0)
    assert intervals(stats, Bootstrap(4000, 0.40))["exact_match"] == (0.5, 0.5)
    counts = bootstrap.resample_counts(2, Bootstrap(4000))
    assert counts.shape == (4000, 2) and set(counts.sum(axis=1)) == {2.0}  # each resample: two images
    assert abs((counts[:, 0] == 1).mean() - 0.5) < 0.03  # one of each half the time


def _covered(trials: int, make, truth: float, metric: str, seed: int = 0, confidence: float = 0.95) -> int:
    rng = np.random.default_rng(seed)
    hits = 0
    for trial in range(trials):
        low, high = intervals(make(rng), Bootstrap(samples=400, confidence=confidence, seed=trial))[metric]
        hits += low <= truth <= high
    return hits


def _within_binomial(hits: int, trials: int, p: float, alpha: float = 1e-4) -> bool:
    """``hits`` of ``trials`` is in the central region of Binomial(trials, ``p``) that holds all
    but ``alpha`` of it: neither tail beyond it has more than ``alpha`` / 2 (exact, no normal
    approximation)."""
    def pmf(k: int) -> float:
        return math.exp(math.lgamma(trials + 1) - math.lgamma(k + 1) - math.lgamma(trials - k + 1)
                        + k * math.log(p) + (trials - k) * math.log1p(-p))

    below = sum(pmf(k) for k in range(hits + 1))
    above = sum(pmf(k) for k in range(hits, trials + 1))
    return below > alpha / 2 and above > alpha / 2


def test_the_binomial_bound_is_exact():
    """Binomial(20, ½): P(X ≤ 3) = 1351 / 2**20 ≈ 0.0013, P(X ≤ 4) = 6196 / 2**20 ≈ 0.0059."""
    assert not _within_binomial(3, 20, 0.5, alpha=0.005) and _within_binomial(4, 20, 0.5, alpha=0.005)
    assert not _within_binomial(17, 20, 0.5, alpha=0.005) and _within_binomial(16, 20, 0.5, alpha=0.005)


def test_95_percent_intervals_cover_a_known_rate_95_percent_of_the_time_and_90_percent_ones_do_not():
    """Exact match of 150 images, each right with chance 0.3: ≈ 95 % of the intervals hold 0.3.
    1,000 trials tell that from a 90 % interval presented as 95 % (300 at ±3.5σ accepted 276/300):
    the 90 % intervals' own coverage must fail the 95 % test."""
    trials = 1000
    make = lambda rng: _exact(rng.random(150) < 0.3)  # noqa: E731
    hits = _covered(trials, make, 0.3, "exact_match")
    assert _within_binomial(hits, trials, 0.95), f"{hits}/{trials} intervals covered the truth"
    narrow = _covered(trials, make, 0.3, "exact_match", confidence=0.90)
    assert _within_binomial(narrow, trials, 0.90), f"{narrow}/{trials} 90 % intervals covered the truth"
    assert not _within_binomial(narrow, trials, 0.95), f"{narrow}/{trials} passed as 95 %"


def test_the_loss_interval_resamples_images_not_words():
    """A loss whose images differ in difficulty (each image's words share it): its words are not
    independent, and an interval must resample whole images to cover the true mean loss, 2.0."""
    def make(rng):
        words = rng.integers(5, 40, size=120).astype(float)
        difficulty = rng.gamma(2.0, 1.0, size=120)  # mean 2, shared by an image's words
        sums = np.array([rng.exponential(d, int(n)).sum() for d, n in zip(difficulty, words, strict=True)])
        return ImageStats(np.arange(120), {LOSS_SUM: sums, WORDS: words})

    trials = 250
    hits = _covered(trials, make, 2.0, "loss", seed=1)
    # the ratio estimator's small bias lowers coverage a little below 0.95 at 120 images
    assert _within_binomial(hits, trials, 0.94), f"{hits}/{trials} intervals covered the truth"


def _same_model_twice(rng, images: int = 150) -> tuple[ImageStats, ImageStats]:
    """Two checkpoints as good as each other: every image has its own chance of being right,
    each checkpoint gets it right with that chance, independently."""
    chance = rng.beta(2, 3, size=images)
    ids = np.arange(images)
    return (ImageStats(ids, {EXACT: (rng.random(images) < chance).astype(float)}),
            ImageStats(ids, {EXACT: (rng.random(images) < chance).astype(float)}))


def test_the_paired_test_on_two_equally_good_checkpoints_is_wrong_about_5_percent_of_the_time():
    rng = np.random.default_rng(3)
    trials, wrong, small_p = 300, 0, 0
    for trial in range(trials):
        a, b = _same_model_twice(rng)
        [found], _ = compare(a, b, Bootstrap(samples=400, seed=trial))
        wrong += found.significant
        small_p += found.p_value <= 0.05
    assert _within_binomial(wrong, trials, 0.05), f"{wrong}/{trials} called significant"
    assert _within_binomial(small_p, trials, 0.05), f"{small_p}/{trials} with p ≤ 0.05"


def test_the_paired_test_sees_a_real_improvement_an_unpaired_look_misses():
    """B gets right every image A gets right and 8 % more: the paired interval excludes 0 although
    the two evaluations' own intervals overlap."""
    rng = np.random.default_rng(4)
    chance = rng.beta(2, 3, size=200)
    a = (rng.random(200) < chance).astype(float)
    b = np.where(rng.random(200) < 0.08, 1.0, a)
    drawn = Bootstrap(samples=1000)
    [found], _ = compare(_exact(a), _exact(b), drawn)
    assert found.difference == pytest.approx(b.mean() - a.mean()) and found.difference > 0
    assert found.significant and found.lower > 0 and found.p_value < 0.01
    low_b, _ = intervals(_exact(b), drawn)["exact_match"]
    _, high_a = intervals(_exact(a), drawn)["exact_match"]
    assert low_b < high_a  # unpaired, they overlap


def test_the_p_value_on_a_hand_computed_case():
    """Two images; A right on neither, B on the first: B − A is ½, and a resample's difference is
    half the times it drew image 0.  Seed 1's nine resamples draw it 1, 0, 2, 0, 2, 1, 1, 2, 0
    times: differences ½, 0, 1, 0, 1, ½, ½, 1, 0, whose mean is ½; centred on it, six lie at least
    ½ (the observed difference) from it.  Two-sided and +1 smoothed, p = (6 + 1) / (9 + 1) = 0.7;
    the unsmoothed share would be 6 / 9, a one-sided test (differences ≤ 0) (3 + 1) / 10."""
    drawn = Bootstrap(samples=9, seed=1)
    assert bootstrap.resample_counts(2, drawn)[:, 0].tolist() == [1, 0, 2, 0, 2, 1, 1, 2, 0]
    [found], _ = compare(_exact([0.0, 0.0]), _exact([1.0, 0.0]), drawn)
    assert found.difference == 0.5 and found.p_value == pytest.approx(0.7, abs=1e-12)


def test_compare_pairs_images_by_id_and_refuses_different_images():
    a = ImageStats(np.array([3, 1, 2]), {EXACT: np.array([1.0, 0.0, 0.0])})
    shuffled = ImageStats(np.array([1, 2, 3]), {EXACT: np.array([0.0, 0.0, 1.0])})
    for found in compare(a, shuffled, Bootstrap(200))[0]:
        assert (found.difference, found.lower, found.upper) == (0.0, 0.0, 0.0)  # the same, once aligned
    broken = ImageStats(np.array([1, 2, 3]), {EXACT: np.array([np.nan, 0.0, 1.0])})
    assert compare(a, broken, Bootstrap(200)) == (  # named, not dropped
        [], {"exact_match": "its difference is not finite (A 0.333333, B nan)"})
    with pytest.raises(NotPaired, match=r"not the same images \(3 and 2 evaluated\)"):
        compare(a, _exact([1.0, 0.0]), Bootstrap(200))
    with pytest.raises(NotPaired, match="different ones"):
        compare(a, ImageStats(np.array([1, 2, 9]), a.columns), Bootstrap(200))


def test_image_stats_round_trip_through_bytes():
    stats = ImageStats(np.array([4, 9]), {LOSS_SUM: np.array([3.0, 4.5]),
                                          WORDS: np.array([2.0, 3.0])}, offsets={"meteor": 0.25})
    again = ImageStats.from_bytes(stats.to_bytes())
    assert again.image_ids.tolist() == [4, 9] and again.offsets == {"meteor": 0.25}
    assert again.metrics()["loss"][0] == stats.metrics()["loss"][0] == 7.5 / 5
