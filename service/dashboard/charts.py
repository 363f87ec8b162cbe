"""The data behind the dashboard's charts: only what a chart draws, computed on the server.

- `curves`: per trial, each requested metric's history (step = epoch) under a label naming its cell and
  seed, and per cell the mean ± std band over its seeds (service.dashboard.bands), downsampled by the tracker
  (service.series.downsample); read from MLflow through the `Tracker` protocol and kept for a few seconds
  per (job, keys, max_points), so several open tabs polling one running sweep cost one read.
- `heatmap`: the trials' best dev score grouped by two swept axes: mean, sample std and n over seeds (and
  over any other axis: the cell pools them, as the caption says).
- `parallel`: one row per trial with a value per swept hyperparameter, its seed and the metric; non-numeric
  values become category indices, with their labels; numbers spanning a decade are marked for a log axis.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from service.dashboard import bands
from service.engine.tracking import Curves, Tracker
from service.errors import ApiError
from service.series import mean_std

# Metric keys a chart may ask for: the trial's per-epoch metrics (worker/tune/epoch_report.py epoch_metrics).
METRIC_KEY = re.compile(r"^(score|best_score|examples_per_s|(train|eval)_[a-z0-9_]{1,60})$")
MAX_KEYS = 8
CACHE_TTL_S = 2.0
MAX_CACHED = 256


def check_keys(keys: Sequence[str]) -> list[str]:
    """The requested metric keys, deduplicated, or a 422 naming the first bad one."""
    unique = list(dict.fromkeys(keys))
    if not unique:
        raise ApiError(422, "name at least one metric with `key`", field="query.key")
    if len(unique) > MAX_KEYS:
        raise ApiError(422, f"at most {MAX_KEYS} metric keys at once", field="query.key")
    for key in unique:
        if not METRIC_KEY.match(key):
            raise ApiError(
                422,
                f"{key!r} is not a per-epoch trial metric (score, best_score, train_*, eval_*)",
                field="query.key",
            )
    return unique


class CurveCache:
    """(job, keys, max_points) -> (when read, curves), for `CACHE_TTL_S` seconds."""

    def __init__(self, ttl_s: float = CACHE_TTL_S) -> None:
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, tuple[str, ...], int], tuple[float, Curves]] = {}

    def get(
        self, tracker: Tracker, job_id: str, keys: list[str], max_points: int, experiment: str | None
    ) -> Curves:
        key = (job_id, tuple(keys), max_points)
        now = time.monotonic()
        with self._lock:
            hit = self._entries.get(key)
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        try:
            curves = tracker.curves(job_id, keys, max_points, experiment)
        except Exception as err:  # MLflow down or slow: the page keeps its last curves and says so
            raise ApiError(503, "MLflow could not be read; the curves update when it answers again") from err
        with self._lock:
            if len(self._entries) >= MAX_CACHED:
                self._entries.clear()
            self._entries[key] = (now, curves)
        return curves


def curves_payload(
    curves: Curves, trials: list[dict[str, Any]], keys: list[str], only: set[str] | None
) -> dict[str, Any]:
    """`{keys, trials: [{trial_id, state, label, cell, curves: {key: [[epoch, value], ...]}}], cells:
    [{label, trial_ids, bands: {key: [[epoch, mean, std or None, n], ...]}}], log: {key: bool}, points}`:
    the trials the job's store knows, in trial order, with whatever history MLflow holds for each; each
    labelled by its cell and seed (service.dashboard.bands, named from all the job's trials so a label
    means the same on every page); the mean ± std band of each cell's trials; whether each key's axis
    starts logarithmic. Values to 6 significant digits (a chart shows 4; a 500-trial sweep's curves stay a
    few hundred kB)."""
    names = bands.labels(trials)
    rows = []
    members: dict[str, list[str]] = {}
    for trial in trials:
        if only is not None and trial["trial_id"] not in only:
            continue
        cell, label = names[trial["trial_id"]]
        members.setdefault(cell, []).append(trial["trial_id"])
        rows.append(
            {
                "trial_id": trial["trial_id"],
                "state": trial["state"],
                "label": label,
                "cell": cell,
                "curves": {
                    k: [[step, float(f"{value:.6g}")] for step, value in v]
                    for k, v in curves.get(trial["trial_id"], {}).items()
                },
            }
        )
    by_trial = {r["trial_id"]: r["curves"] for r in rows}
    per_key = {k: bands.bands(members, by_trial, k) for k in keys}
    cells = [
        {"label": cell, "trial_ids": ids, "bands": {k: per_key[k][cell] for k in keys if cell in per_key[k]}}
        for cell, ids in members.items()
    ]
    log = {k: bands.log_scale(p[1] for r in rows for p in r["curves"].get(k, [])) for k in keys}
    points = sum(len(v) for r in rows for v in r["curves"].values())
    return {"keys": keys, "trials": rows, "cells": cells, "log": log, "points": points}


def _label(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _sort_key(value: Any) -> tuple[int, float, str]:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, _label(value))


def heatmap(trials: list[dict[str, Any]], x: str, y: str, axes: list[str]) -> dict[str, Any]:
    """The mean, std and n of the trials' best scores in each (x, y) cell; None where no trial scored.
    `z[i][j]` is row y_values[i], column x_values[j] (Plotly's heatmap layout)."""
    for name, field in ((x, "query.x"), (y, "query.y")):
        if name not in axes:
            raise ApiError(
                422,
                f"{name!r} is not a swept axis of this job; axes: {', '.join(axes) or 'none'}",
                field=field,
            )
    if x == y:
        raise ApiError(422, "choose two different axes", field="query.y")
    scores: dict[tuple[str, str], list[float]] = defaultdict(list)
    xs: dict[str, Any] = {}
    ys: dict[str, Any] = {}
    for trial in trials:
        vx, vy = trial["params"].get(x), trial["params"].get(y)
        xs[_label(vx)], ys[_label(vy)] = vx, vy
        if trial["best_score"] is not None:
            scores[(_label(vx), _label(vy))].append(float(trial["best_score"]))
    x_labels = [_label(v) for v in sorted(xs.values(), key=_sort_key)]
    y_labels = [_label(v) for v in sorted(ys.values(), key=_sort_key)]
    z, std, n = [], [], []
    for ly in y_labels:
        row_z, row_s, row_n = [], [], []
        for lx in x_labels:
            values = scores.get((lx, ly), [])
            m, s = mean_std(values) if values else (None, None)
            row_z.append(m)
            row_s.append(s)
            row_n.append(len(values))
        z.append(row_z)
        std.append(row_s)
        n.append(row_n)
    return {"x": x, "y": y, "x_values": x_labels, "y_values": y_labels, "z": z, "std": std, "n": n}


def parallel(trials: list[dict[str, Any]], axes: list[str], metric: str) -> dict[str, Any]:
    """Parallel coordinates: a dimension per hyperparameter, the seed last among them (numbers as they
    are, with `log` true where they span a decade; other values as category indices with `ticks`), then
    the metric with its `range` [min, max], which the colour bar spans too; one line per scored trial."""
    scored = [t for t in trials if t["best_score"] is not None]
    ordered = sorted(a for a in axes if a != bands.SEED) + [a for a in axes if a == bands.SEED]
    dimensions: list[dict[str, Any]] = []
    for name in ordered:
        values = [t["params"].get(name) for t in scored]
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        if numeric:
            dimensions.append({"label": name, "values": values, "log": bands.log_scale(values)})
        else:
            labels = sorted({_label(v) for v in values})
            index = {label: i for i, label in enumerate(labels)}
            dimensions.append({"label": name, "values": [index[_label(v)] for v in values], "ticks": labels})
    scores = [float(t["best_score"]) for t in scored]
    span = [min(scores), max(scores)] if scores else None
    dimensions.append({"label": metric, "values": scores, "range": span, "log": False})
    return {"dimensions": dimensions, "trial_ids": [t["trial_id"] for t in scored]}
