"""How a sweep's summary is read, on both sides: how many trials reached a result, and, when none did, one
line that says why. The summary itself is built by worker/tune/summary.py; the driver prints it and the
control plane reads it back, so its reading lives here, torch- and MLflow-free."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

COMPLETED_STATES = ("TERMINATED", "STOPPED")  # a trial in these reached a result (STOPPED: by ASHA)


def completed_trials(summary: Mapping[str, Any] | None) -> int | None:
    """Trials of the sweep that reached a result (None when the summary says nothing of its trials)."""
    counts = (summary or {}).get("trials_by_state")
    if not isinstance(counts, Mapping):
        return None
    return sum(int(counts.get(state) or 0) for state in COMPLETED_STATES)


def state_counts(counts: Any) -> str:
    """Trials by state as a person reads them, the most frequent first: "8 TERMINATED, 1 ERROR" (a
    timeline's line, not a Python dict); states with no trial are left out."""
    if not isinstance(counts, Mapping):
        return "no trial states recorded"
    shown = sorted(((int(n), str(s)) for s, n in counts.items() if n), key=lambda ns: (-ns[0], ns[1]))
    return ", ".join(f"{n} {state}" for n, state in shown) or "no trial"


def no_result_reason(summary: Mapping[str, Any]) -> str:
    """One line for a sweep with no completed trial: the states, and why its trials failed (each distinct
    class and reason once, the most frequent first; the summary's `errors` has them all)."""
    counts_by_state = summary.get("trials_by_state")
    failed = {s: n for s, n in counts_by_state.items() if n} if isinstance(counts_by_state, Mapping) else {}
    counts: dict[tuple[str, str], int] = {}
    errors = summary.get("errors")
    for error in errors if isinstance(errors, list) else []:
        if not isinstance(error, Mapping):
            continue
        key = (str(error.get("error_class") or "other"), str(error.get("error") or "no reason recorded"))
        counts[key] = counts.get(key, 0) + 1
    reasons = [f"{n} x {cls}: {text}" for (cls, text), n in sorted(counts.items(), key=lambda kv: -kv[1])]
    line = f"no trial completed ({state_counts(failed)})"
    if reasons:
        line += f"; failed trials: {reasons[0]}"
        line += f" (and {len(reasons) - 1} other reasons)" if len(reasons) > 1 else ""
    return line
