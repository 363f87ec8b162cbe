"""Selecting training and eval examples: a seeded fraction (domain adaptation) or the first N (smoke runs)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from worker.training.data import Example


def subsample(examples: Sequence[Example], fraction: float, seed: int) -> list[Example]:
    """A random ``fraction`` of ``examples`` (at least 1), in their original order.

    Deterministic for a given seed, and nested: with the same seed the 0.1% sample lies inside the 1%
    one, which lies inside the 10% one (one seeded permutation, cut at different lengths). Used for
    the paper's domain-adaptation study (fractions 0.001, 0.01, 0.1, 1.0). Not stratified.
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if not examples:
        raise ValueError("cannot subsample an empty dataset")
    if fraction == 1.0:
        return list(examples)
    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)  # Python's Mersenne Twister: same permutation on every platform
    keep = max(1, round(fraction * len(examples)))
    return [examples[i] for i in sorted(order[:keep])]


def take_first(examples: Sequence[Example], n: int | None) -> list[Example]:
    """The first ``n`` examples (all when ``n`` is None): ``max_train_samples``/``max_eval_samples``.

    Deliberately the first n in file order, not a random sample, so a capped eval set is the same
    rows for every trial and every seed; use :func:`subsample` for a random fraction.
    """
    if n is None:
        return list(examples)
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    return list(examples[:n])
