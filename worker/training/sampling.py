"""Which rows of a split a run uses: a seeded stratified sample (`max_train_samples`, `max_eval_samples`, the
held-out validation rows), the first N (`sampling: head`), or a seeded fraction (domain adaptation).

Rows are 0-based positions in the split as read (its labelled rows, in file order); every function returns
them sorted, so the examples keep their file order. GLUE's files are ordered by source (STS-B's first 1,000
pairs are all MSRvid captions, CoLA's first 1,000 sentences come from 3 of its 17 publications), so the
first N rows are a sample of a few sources, not of the task: a random sample is stratified by the row's
source genre (`Example.stratum`, where the file names one) and, for classification, its label, each stratum
getting its share of N by largest remainders.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Hashable, Iterable, Sequence
from typing import TypeVar

from worker.contract.trial import SamplingName
from worker.training.data import Example

T = TypeVar("T")
Stratum = tuple[str | None, int | None]  # (the row's source genre, its class id); None where there is none


def strata(examples: Sequence[Example], regression: bool) -> list[Stratum]:
    """Each row's stratum: its source and, for classification, its label (a regression score is not
    binned: the source strata already spread STS-B's scores, and a sample of 1,000 draws them at random)."""
    return [(e.stratum, None if regression else int(e.label)) for e in examples]


def allocate(sizes: Sequence[int], n: int) -> list[int]:
    """Largest-remainder (Hamilton) shares of `n` rows over strata of `sizes` rows: each stratum gets
    floor(n * size / total), and the rows left over go one each to the largest remainders (ties: the
    stratum seen first). In integers, so the shares sum to exactly min(n, total) and none exceeds its size."""
    total = sum(sizes)
    n = min(n, total)
    if n <= 0:
        return [0] * len(sizes)
    shares = [n * size // total for size in sizes]
    remainders = [n * size % total for size in sizes]  # in units of 1/total of a row
    left = n - sum(shares)  # < len(sizes), and at most the count of non-zero remainders
    for i in sorted(range(len(sizes)), key=lambda i: -remainders[i])[:left]:  # stable: ties by order
        shares[i] += 1
    return shares


def stratified_rows(
    keys: Sequence[Hashable], n: int, seed: int | str, among: Sequence[int] | None = None
) -> list[int]:
    """`n` of the rows `among` (default: all rows of `keys`), drawn at random within each stratum
    (`keys[row]`) in proportion to its size (`allocate`); sorted. Deterministic for `seed`."""
    groups: dict[Hashable, list[int]] = {}  # stratum -> its rows, strata in order of first appearance
    for row in range(len(keys)) if among is None else among:
        groups.setdefault(keys[row], []).append(row)
    rng = random.Random(seed)  # Mersenne Twister, seeded from an int or a str: the same draw everywhere
    chosen: list[int] = []
    for members, share in zip(groups.values(), allocate([len(m) for m in groups.values()], n), strict=True):
        chosen += rng.sample(members, share)
    return sorted(chosen)


def select_rows(keys: Sequence[Hashable], n: int | None, seed: int, how: SamplingName) -> list[int]:
    """The rows `max_train_samples` / `max_eval_samples` = `n` keep: all of them when `n` is None or not
    below the split's size; else the first `n` (`head`) or a stratified sample (`random`)."""
    if n is not None and n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if n is None or n >= len(keys):
        return list(range(len(keys)))
    if how == "head":
        return list(range(n))
    return stratified_rows(keys, n, seed)


def split_validation(
    keys: Sequence[Hashable], rows: Sequence[int], fraction: float, seed: int
) -> tuple[list[int], list[int]]:
    """(training rows, validation rows): a stratified `fraction` of `rows` held out (at least one, and at
    least one left to train on). Its own random stream (`seed` salted), so it does not repeat the draw that
    picked `rows`; the trial's seed plays no part, so every method and seed holds out the same rows."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"validation fraction must be in (0, 1), got {fraction}")
    if len(rows) < 2:
        raise ValueError(f"a validation split needs at least 2 training rows, got {len(rows)}")
    size = min(len(rows) - 1, max(1, round(fraction * len(rows))))
    held = stratified_rows(keys, size, f"validation:{seed}", among=rows)
    out = set(held)
    return [row for row in rows if row not in out], held


def rows_sha256(rows: Iterable[int]) -> str:
    """SHA-256 (hex) of the sorted row positions, comma-separated: which rows of a split a run used."""
    return hashlib.sha256(",".join(str(row) for row in sorted(rows)).encode()).hexdigest()


def subsample(examples: Sequence[T], fraction: float, seed: int) -> list[T]:
    """A random ``fraction`` of ``examples`` (rows or examples; at least 1), in their original order.

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
