"""Paired comparisons across seeds, and the best score within a compute budget. Pure functions.

A pair is one seed: the same seed gives the same data order and head initialisation to both methods, so
the per-seed difference removes most of the seed's own variance (on STS-B-1k the seed sd of vanilla is up
to 6 points, research/results/baseline_stsb1k.json).

The reported interval and p are the paired t's (df = n − 1): at n = 5 its interval covers the true mean
difference 95% of the time on normal data, where the percentile bootstrap of the mean covered 84%
(`python -m research.reproduction.coverage`). The exact sign and Wilcoxon signed-rank tests
(`research.reproduction.exact`) stand beside it, free of the normality assumption; with 5 seeds neither can
go below 0.0625 (`smallest_exact_p`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

from research.reproduction.exact import sign_test, smallest_exact_p, wilcoxon_signed_rank

LEVEL = 0.95  # every interval in the report
ALPHA = 0.05  # what "a difference found" means, on the t p (Holm-adjusted where a family is named)


@dataclass(frozen=True)
class Paired:
    """method minus baseline over n seeds, in the metric's points."""

    n: int
    mean: float
    low: float  # the 95% paired t interval of the mean difference (df = n - 1) ...
    high: float  # ... and its upper end
    p_t: float  # two-sided paired t-test
    p_sign: float  # two-sided exact sign test (zero differences dropped)
    p_wilcoxon: float  # two-sided exact Wilcoxon signed-rank test (zeros dropped, ties at mid-ranks)

    @property
    def smallest_exact_p(self) -> float:
        """The smallest p the exact tests can give at this n: 2 / 2^n (0.0625 at n = 5)."""
        return smallest_exact_p(self.n)


def t_interval(diffs: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """The paired t interval of the mean over the last axis of `diffs` (..., n), n >= 2: mean ± t_{(1+level)/2,
    n-1} · sd / √n. Vectorised, so the coverage simulation runs the report's own code."""
    diffs = np.asarray(diffs, dtype=float)
    n = diffs.shape[-1]
    mean = diffs.mean(axis=-1)
    half = scipy_stats.t.ppf((1 + level) / 2, n - 1) * diffs.std(axis=-1, ddof=1) / math.sqrt(n)
    return mean - half, mean + half


def paired(method: Sequence[float], baseline: Sequence[float]) -> Paired:
    """`method[i]` and `baseline[i]` belong to the same seed. Needs n >= 2."""
    if len(method) != len(baseline) or len(method) < 2:
        raise ValueError(
            f"paired: need two equal-length lists of at least 2, got {len(method)} and {len(baseline)}"
        )
    diffs = np.asarray(method, dtype=float) - np.asarray(baseline, dtype=float)
    bounds = t_interval(diffs)
    low, high = float(bounds[0]), float(bounds[1])
    if np.allclose(diffs, diffs[0]):  # sd 0: the t statistic is undefined; every seed moved alike
        p_t = 0.0 if diffs[0] != 0 else 1.0
        low = high = float(diffs.mean())
    else:
        p_t = float(scipy_stats.ttest_1samp(diffs, 0.0).pvalue)
    return Paired(
        len(diffs),
        float(diffs.mean()),
        low,
        high,
        p_t,
        sign_test(diffs.tolist()),
        wilcoxon_signed_rank(diffs.tolist()),
    )


def reading(result: Paired, adjusted: float | None = None) -> str:
    """What a comparison says from its t p and, where it is one of a family, Holm's `adjusted` p: "no
    difference found" where the t p >= ALPHA (its interval holds 0), "higher"/"lower" where the adjusted p
    (or the t p alone) is below, and "lower, not after Holm" between. Never "matches" or "equivalent": a
    test that finds no difference has not shown there is none (an equivalence test's job, with a margin)."""
    if result.p_t >= ALPHA:
        return "no difference found"
    direction = "higher" if result.mean > 0 else "lower"
    return direction if adjusted is None or adjusted < ALPHA else f"{direction}, not after Holm"


def ci(result: Paired) -> str:
    """'95% CI [a, b]' in the metric's points."""
    return f"{100 * LEVEL:.0f}% CI [{result.low:+.2f}, {result.high:+.2f}]"


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of `p_values` (one family of tests), in their order: the adjusted p
    of the k-th smallest is the running max of (m - k + 1) * p, capped at 1."""
    m = len(p_values)
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else math.nan)


def epochs_within(epoch_seconds: Sequence[float], budget_s: float) -> int:
    """How many whole epochs ended within `budget_s` seconds of training."""
    elapsed, done = 0.0, 0
    for seconds in epoch_seconds:
        elapsed += seconds
        if elapsed > budget_s * (1 + 1e-9):
            break
        done += 1
    return done


def best_within(curve: Sequence[float], epoch_seconds: Sequence[float], budget_s: float) -> float | None:
    """The best dev score among the epochs that ended within `budget_s` seconds of training; None if the
    first epoch alone takes longer. A *cut schedule*: the run's warm-up and decay were planned over all its
    epochs, so a slower method is judged mid-schedule (research.reproduction.budget plans the honest arms)."""
    done = epochs_within(epoch_seconds[: len(curve)], budget_s)
    return max(curve[:done]) if done else None
