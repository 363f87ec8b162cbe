"""Which epoch a trial record reports, kept apart from what it reports (issue 29).

A trial's dev curve is GLUE dev's main metric after each epoch. Its score is dev at the epoch that the
held-out validation rows chose (`validation_fraction`: the first epoch with the best validation metric), not
the best of the dev curve: choosing on dev and reporting dev is optimistic by the maximum of noisy epochs. A
run without validation rows (every `repro-v1` record) was chosen on dev; its record says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def chosen_index(selection: Sequence[float]) -> int:
    """0-based index of the first epoch with the best selection value (every main metric: higher is better)."""
    if not selection:
        raise ValueError("no epoch to choose from")
    return max(range(len(selection)), key=lambda i: (selection[i], -i))


def selected(dev: Sequence[float], validation: Sequence[float] | None) -> dict[str, Any]:
    """The record's reported fields from its dev curve and, when the run held rows out, its validation
    curve (same epochs, same scale): `value` (dev at the chosen epoch), `selected_epoch` (1-based),
    `selection_value` (what chose it: validation, else dev), `selected_on`, and beside them `best_dev` (the
    best of the dev curve, what `repro-v1` reported) and `last_value` (dev at the last epoch)."""
    if validation is not None and len(validation) != len(dev):
        raise ValueError(f"{len(validation)} validation points for {len(dev)} dev points")
    chooser = list(validation) if validation else list(dev)
    i = chosen_index(chooser)
    return {
        "value": float(dev[i]),
        "selected_epoch": i + 1,
        "selection_value": float(chooser[i]),
        "selected_on": "validation" if validation else "dev",
        "best_dev": float(max(dev)),
        "last_value": float(dev[-1]),
    }


def subsets_label(training: dict[str, Any]) -> str:
    """How a trial's rows were chosen, for the record's `subsets` field (records.FILE_ORDER otherwise)."""
    n = training.get("max_train_samples")
    held = float(training.get("validation_fraction") or 0.0)
    how = training.get("sampling", "random")
    size = "the whole training file" if n is None else f"{int(n)} rows"
    split = f", {held:.0%} of them held out for validation" if held else ""
    seed = training.get("fraction_seed", 13)
    picked = "stratified random" if how == "random" else "file order (first N)"
    return f"{picked} {size} (fraction_seed {seed}){split}"
