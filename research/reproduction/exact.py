"""Exact two-sided tests of paired differences that assume no distribution: the sign test and the
Wilcoxon signed-rank test, by counting every sign pattern (no normal approximation). Pure functions.

With n pairs each test has 2^n equally likely sign patterns under the null, so its smallest two-sided p is
2 / 2^n: 0.0625 at 5 seeds, above 0.05. At n = 5 these tests can say how many seeds point one way, never
"p < 0.05".
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# Differences within this of 0 count as ties with 0, and |d| equal to 9 decimals as tied ranks: the
# records' scores are percentages rounded from counts (e.g. 100/872 per SST-2 sentence), and their float
# differences carry ~1e-13 of noise that would otherwise break ties at random.
DECIMALS = 9


def smallest_exact_p(n: int) -> float:
    """The smallest two-sided p of the sign or Wilcoxon test on n nonzero, untied pairs: every pair one way."""
    return min(1.0, 2.0 / 2**n) if n > 0 else 1.0


def _nonzero(diffs: Sequence[float]) -> list[float]:
    return [d for d in (round(float(x), DECIMALS) for x in diffs) if d != 0.0]


def sign_test(diffs: Sequence[float]) -> float:
    """Two-sided exact sign test: 2 · P(X <= min(k, n − k)), X ~ Binomial(n, 1/2), over the n nonzero
    differences of which k are positive; capped at 1 (1 when every difference is 0)."""
    nonzero = _nonzero(diffs)
    n = len(nonzero)
    if n == 0:
        return 1.0
    k = sum(d > 0 for d in nonzero)
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1))
    return min(1.0, 2 * tail / float(2**n))


def _mid_ranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..n of `values`, ties given the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start : end + 1]:
            ranks[i] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def wilcoxon_signed_rank(diffs: Sequence[float]) -> float:
    """Two-sided exact Wilcoxon signed-rank test of the differences against 0.

    Zeros are dropped (Wilcoxon's rule; scipy's zero_method="wilcox"); tied |d| get mid-ranks, and the null
    distribution of W+ (the sum of the positive differences' ranks) is counted exactly over the 2^n sign
    patterns of *those* ranks, so ties are exact too. p = 2 · min(P(W+ <= w), P(W+ >= w)), capped at 1.
    """
    nonzero = _nonzero(diffs)
    if not nonzero:
        return 1.0
    ranks = _mid_ranks([abs(d) for d in nonzero])
    doubled = [round(2 * r) for r in ranks]  # mid-ranks are multiples of 1/2: count in integers
    w = sum(r for r, d in zip(doubled, nonzero, strict=True) if d > 0)
    counts = [0] * (sum(doubled) + 1)  # counts[s]: sign patterns whose positive ranks sum to s
    counts[0] = 1
    for r in doubled:
        for s in range(len(counts) - 1, r - 1, -1):
            counts[s] += counts[s - r]
    total = float(2 ** len(doubled))
    below, above = sum(counts[: w + 1]), sum(counts[w:])
    return min(1.0, 2 * min(below, above) / total)


def fmt_exact(p: float) -> str:
    """An exact p as the report prints it: up to 4 decimals, so 0.0625 (the floor at 5 seeds) stays itself."""
    return f"{p:.4f}".rstrip("0").rstrip(".") if p > 0 else "0"
