"""Paired comparisons across seeds, and the best score within a compute budget. Pure functions.

A pair is one seed: the same seed gives the same data order and head initialisation to both methods, so
the per-seed difference removes most of the seed's own variance (on STS-B-1k the seed sd of vanilla is up
to 6 points, research/results/baseline_stsb1k.json).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats


@dataclass(frozen=True)
class Paired:
    """method minus baseline over n seeds, in the metric's points."""

    n: int
    mean: float
    low: float  # the paired bootstrap's 2.5th percentile of the mean difference
    high: float  # ... and its 97.5th
    p_t: float  # two-sided paired t-test
    p_bootstrap: float  # two-sided: twice the share of bootstrap means on the other side of 0


def paired(
    method: Sequence[float], baseline: Sequence[float], *, draws: int = 10_000, seed: int = 0
) -> Paired:
    """`method[i]` and `baseline[i]` belong to the same seed. Needs n >= 2."""
    if len(method) != len(baseline) or len(method) < 2:
        raise ValueError(
            f"paired: need two equal-length lists of at least 2, got {len(method)} and {len(baseline)}"
        )
    diffs = np.asarray(method, dtype=float) - np.asarray(baseline, dtype=float)
    n = len(diffs)
    rng = np.random.default_rng(seed)
    means = diffs[rng.integers(0, n, size=(draws, n))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    if np.allclose(diffs, diffs[0]):
        p_t = 0.0 if diffs[0] != 0 else 1.0
    else:
        p_t = float(scipy_stats.ttest_1samp(diffs, 0.0).pvalue)
    other_side = (means <= 0).mean() if diffs.mean() > 0 else (means >= 0).mean()
    return Paired(n, float(diffs.mean()), float(low), float(high), p_t, float(min(1.0, 2 * other_side)))


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


def best_within(curve: Sequence[float], epoch_seconds: Sequence[float], budget_s: float) -> float | None:
    """The best dev score among the epochs that ended within `budget_s` seconds of training; None if the
    first epoch alone takes longer."""
    elapsed, best = 0.0, None
    for score, seconds in zip(curve, epoch_seconds, strict=False):
        elapsed += seconds
        if elapsed > budget_s * (1 + 1e-9):
            break
        best = score if best is None else max(best, score)
    return best
