"""A trial record's identity, and folding new records into a results file.

The campaign's results come from several places over time: the service's MLflow store on one machine
(`collect`), lent GPUs (`direct`), a later session on a new machine whose store starts empty. Each writes
into the same JSON lists (`research/results/paper_ablation*.json`, `reproduction_grid.json`), so writing
merges: a new record replaces the one of the same trial, and records of trials it does not carry stay.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

TrialKey = tuple[str, str, int, float, int]  # task, report row, seed, learning rate, planned epochs


def trial_key(trial: dict[str, Any]) -> TrialKey:
    """A trial's identity, from its TrainConfig dict (tagged) or from its record."""
    if "_method" in trial:
        return (trial["task"], trial["_method"], int(trial["seed"]), float(trial["learning_rate"]),
                int(trial["epochs"]))  # fmt: skip
    return (trial["task"], trial["method"], int(trial["seed"]), float(trial["learning_rate"]),
            int(trial["planned_epochs"]))  # fmt: skip


def merge_into(path: Path, new: Iterable[dict[str, Any]]) -> int:
    """Fold `new` into the JSON list at `path` (created if missing), a new record replacing the one of the
    same trial; returns how many records the file now has."""
    rows = json.loads(path.read_text()) if path.exists() else []
    by_key = {trial_key(r): r for r in rows}
    for row in new:
        by_key[trial_key(row)] = row
    path.write_text(json.dumps(list(by_key.values()), indent=1) + "\n")
    return len(by_key)


# How a record's training examples were chosen. Every record written before issue 29 trained on the first N
# rows of its task's GLUE train file (N = `train_examples`, 1,000 or the whole file), in file order, not a
# random sample; such records carry no field for it, so the report reads a missing one as this. A record
# that says otherwise (a `subsets` field) is printed as it says.
FILE_ORDER = "file-order (first N rows)"


def subsets(records: Iterable[dict[str, Any]]) -> list[str]:
    """The distinct ways `records` chose their training examples, a missing field read as FILE_ORDER."""
    return sorted({str(r.get("subsets", FILE_ORDER)) for r in records})
