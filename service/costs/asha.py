"""What ASHA is expected to save: the expected share of its epochs a trial runs under Ray Tune's
`ASHAScheduler` (worker/tune/tuning.py: time attribute `epoch`, max_t = the longest trial's epochs).

Ray's rule: rungs at grace_period x reduction_factor^k below max_t; a trial reaching a rung is stopped when
its score is below the (1 - 1/reduction_factor) percentile of the scores recorded there before it (the
first to arrive always goes on). With exchangeable scores arriving in random order, the k-th arrival goes
on with probability (1 + (k - 2) / rf) / k for k >= 2 (1 for k = 1): 1/rf for many trials, more for few.
An expectation, not a promise: equal scores (a model stuck at the majority class) stop nobody.
"""

from __future__ import annotations

import math


def pass_fraction(arrivals: float, reduction_factor: float) -> float:
    """The expected share of `arrivals` trials that go on past a rung."""
    m = max(1, round(arrivals))
    passing = 1.0 + sum((1 + (k - 2) / reduction_factor) / k for k in range(2, m + 1))
    return passing / m


def rungs(max_t: int, grace_period: int, reduction_factor: float) -> list[int]:
    """The epochs at which ASHA decides, below max_t (a trial is checked at the first epoch >= a rung)."""
    out: list[int] = []
    k = 0
    while (milestone := math.ceil(grace_period * reduction_factor**k - 1e-9)) < max_t:
        if milestone not in out:
            out.append(milestone)
        k += 1
    return out


def expected_epochs(
    trials: int, epochs: int, max_t: int, grace_period: int, reduction_factor: float
) -> float:
    """Expected epochs one trial of `epochs` runs, among `trials` trials that all start."""
    alive, arrivals, done, previous = 1.0, float(trials), 0.0, 0
    for rung in rungs(max_t, grace_period, reduction_factor):
        if rung >= epochs:
            break
        done += alive * (rung - previous)
        share = pass_fraction(arrivals, reduction_factor)
        alive, arrivals, previous = alive * share, arrivals * share, rung
    return done + alive * (epochs - previous)
