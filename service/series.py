"""Metric series as charts need them: pure functions, no MLflow, no FastAPI.

A series is a list of `(step, value)` pairs in step order; for a trial's per-epoch metrics the step is the
epoch (worker.tune.trainable logs with step = epoch). A trial that was resumed logs an epoch again with the
same value, so `clean` keeps one point per step (the last logged) and drops values that are not finite
(JSON has no NaN, and a skipped step may log one).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

Point = tuple[int, float]  # (step = epoch, value)
Series = list[Point]


def clean(points: Iterable[tuple[int, float, int]]) -> Series:
    """`(step, value, timestamp_ms)` triples as one finite point per step, the latest logged, by step."""
    latest: dict[int, tuple[int, float]] = {}
    for step, value, timestamp in points:
        if step not in latest or timestamp >= latest[step][0]:
            latest[step] = (timestamp, value)
    return [(step, v) for step, (_, v) in sorted(latest.items()) if math.isfinite(v)]


def downsample(series: Series, max_points: int) -> Series:
    """At most `max_points` points that keep the series' shape: the first and last point, and in each of
    (max_points - 2) // 2 equal buckets of the rest its minimum and maximum (in step order), so a spike or
    a dip survives the thinning where striding would drop it. Short series come back unchanged."""
    if max_points < 2:
        raise ValueError("max_points must be at least 2")
    if len(series) <= max_points:
        return list(series)
    first, inner, last = series[0], series[1:-1], series[-1]
    buckets = (max_points - 2) // 2
    if buckets == 0:
        return [first, last]
    size = len(inner) / buckets
    out: Series = [first]
    for b in range(buckets):
        chunk = inner[int(b * size) : int((b + 1) * size)]
        if not chunk:
            continue
        low = min(chunk, key=lambda p: p[1])
        high = max(chunk, key=lambda p: p[1])
        out.extend(sorted({low, high}))  # one point when the bucket is flat
    out.append(last)
    return out


def mean_std(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (n - 1) of a non-empty list; the deviation of a single value is
    undefined (None), not 0: the pages say "n = 1, no std" rather than "± 0"."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
