"""What makes the job page's charts readable without hovering: a label per trial and per cell, the mean ±
std band of each cell's seeds, and whether an axis should be logarithmic.

- `labels`: a trial's label names its cell and its seed ("learning_rate=2e-5 lambda_s=1 seed=1"), from the
  parameters that differ between the job's trials (a value every trial shares names nothing).
- `bands`: per cell and epoch, the mean, the sample std (None where fewer than two seeds logged that epoch:
  undefined, not 0) and n of a metric over the cell's trials.
- `log_scale`: a logarithmic axis where the values are all positive and span at least a decade (a learning
  rate of 1e-5..1e-4, a regulariser term that falls from 1e-1 to 1e-5); the page offers a toggle either way.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from service.series import mean_std

SEED = "seed"
LOG_RATIO = 10.0  # max / min at or above which an all-positive axis is drawn logarithmic


def log_scale(values: Iterable[Any]) -> bool:
    """True when every value is a positive finite number and the largest is at least LOG_RATIO times the
    smallest. Zero, a negative value, a non-number or nothing at all: linear (a log axis cannot show them)."""
    numbers = list(values)
    # type(), not isinstance: a bool is no number here, and 10,000 curve points are checked per answer
    if not numbers or any(type(v) not in (int, float) or v != v for v in numbers):  # v != v: NaN
        return False
    low, high = min(numbers), max(numbers)
    return bool(low > 0 and math.isfinite(high) and high >= LOG_RATIO * low)


def short(value: Any) -> str:
    """A parameter's value as a label shows it: 2e-05 -> "2e-5", 1e-4 -> "1e-4", 3.0 -> "3", 0.3 -> "0.3",
    text as is."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if isinstance(value, int):
        return str(value)
    if value != 0 and not 1e-3 <= abs(value) < 1e5:  # a learning rate, a tiny epsilon: mantissa e exponent
        mantissa, exponent = f"{value:.3e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return f"{value:.4g}"


def varying(trials: Sequence[Mapping[str, Any]]) -> list[str]:
    """The parameters (seed last) whose values differ between `trials`; all of them when none differs."""
    names = sorted({k for t in trials for k in t["params"]} - {SEED})
    differ = [n for n in names if len({json.dumps(t["params"].get(n), sort_keys=True) for t in trials}) > 1]
    chosen = differ or names
    return [*chosen, SEED] if any(SEED in t["params"] for t in trials) else chosen


def labels(trials: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
    """trial id -> (its cell's label, its own label: the cell's and its seed)."""
    names = varying(trials)
    out = {}
    for trial in trials:
        params = trial["params"]
        cell = " ".join(f"{n}={short(params.get(n))}" for n in names if n != SEED) or "every trial"
        seed = params.get(SEED)
        own = f"{cell} {SEED}={short(seed)}" if seed is not None else f"{cell} {trial['trial_id']}"
        out[str(trial["trial_id"])] = (cell, own)
    return out


def bands(
    cells: Mapping[str, Sequence[str]],
    curves: Mapping[str, Mapping[str, Sequence[Sequence[float]]]],
    key: str,
) -> dict[str, list[list[float | int | None]]]:
    """Per cell label, the band of `key`: `[[epoch, mean, std or None, n], ...]` over its trials' points
    at each epoch (`curves`: trial id -> key -> [[epoch, value], ...]); a cell without points has none."""
    out: dict[str, list[list[float | int | None]]] = {}
    for cell, trial_ids in cells.items():
        by_epoch: dict[int, list[float]] = defaultdict(list)
        for trial_id in trial_ids:
            for epoch, value in curves.get(trial_id, {}).get(key, []):
                by_epoch[int(epoch)].append(float(value))
        rows: list[list[float | int | None]] = []
        for epoch in sorted(by_epoch):
            values = by_epoch[epoch]
            mean, std = mean_std(values)
            rows.append([epoch, _round(mean), None if std is None else _round(std), len(values)])
        if rows:
            out[cell] = rows
    return out


def _round(value: float) -> float:
    return float(f"{value:.6g}")
