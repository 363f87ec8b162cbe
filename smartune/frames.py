"""A job's trials as a table: one row per trial, its parameters and its outcome side by side.

The parameters are each trial's `params` as the API returns them: the values of the sweep's axes for that
trial (its cell; a setting its method ignores is null), flattened with dotted names. They are the complete
per-trial source: every trial has them from its first sync, whatever its state, while the results' cells
exist only once the job has SUCCEEDED and group the seeds. What the axes do not vary is the same for every
trial and is in the job's spec (`Client.job(id)["spec"]`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas

# The outcome of a trial, after its parameters; then `metrics.<name>`, the latest value of each metric.
TRIAL_COLUMNS = ("state", "attempt", "best_score", "last_epoch", "error_class", "mlflow_run_id")
METRIC_PREFIX = "metrics."


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"a": {"b": 1}, "c": 2}` -> `{"a.b": 1, "c": 2}`; lists stay values."""
    flat: dict[str, Any] = {}
    for name, value in values.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{key}."))
        else:
            flat[key] = value
    return flat


def trial_rows(trials: Iterable[Mapping[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """(columns, rows) of the trials: the parameters in order of first appearance, TRIAL_COLUMNS, then
    the metrics, sorted; each row also holds its `trial_id`."""
    params: dict[str, None] = {}
    metrics: set[str] = set()
    rows = []
    for trial in trials:
        row = flatten(trial.get("params") or {})
        params.update(dict.fromkeys(row))
        row.update({name: trial.get(name) for name in TRIAL_COLUMNS})
        measured = {f"{METRIC_PREFIX}{k}": v for k, v in (trial.get("metrics") or {}).items()}
        metrics.update(measured)
        row.update(measured)
        row["trial_id"] = trial["trial_id"]
        rows.append(row)
    columns = [p for p in params if p not in TRIAL_COLUMNS] + list(TRIAL_COLUMNS) + sorted(metrics)
    return columns, rows


def trials_frame(trials: Iterable[Mapping[str, Any]]) -> pandas.DataFrame:
    """The trials as a DataFrame indexed by `trial_id` (see `trial_rows` for the columns)."""
    try:
        import pandas as pd
    except ImportError as err:  # pragma: no cover - pandas comes with mlflow here
        raise ImportError("trials_frame needs pandas: pip install pandas") from err
    columns, rows = trial_rows(trials)
    index = pd.Index([row["trial_id"] for row in rows], name="trial_id")
    return pd.DataFrame([{c: row.get(c) for c in columns} for row in rows], index=index, columns=columns)
