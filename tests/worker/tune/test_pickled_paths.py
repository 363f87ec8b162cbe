"""What Tune pickles of ours into a sweep's experiment state is a compatibility contract.

Tune writes the trainable, the callbacks, the trial resolver and the search state into the experiment
folder (`tuner.pkl`, `experiment_state-*.json`) and unpickles them when the next attempt of the job
restores it. Those pickles name our classes and functions by module path: moving one (as a clean-up once
moved `AloneAfterOom` from worker.tune.tuning to worker.tune.callbacks) makes every job started before
the upgrade fail at its next attempt with "Can't get attribute ...", and a planned restart of the service
is such an attempt. So the paths are pinned here: a move must leave the old path importable (an alias)
and extend this list, never shrink it.
"""

from __future__ import annotations

import importlib
import io
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

# module -> names that a sweep's experiment state refers to (seen in a real sweep; see the test below).
PICKLED = {
    "worker.tune.callbacks": {"TrialStateCallback", "AloneAfterOom"},  # the second: sweeps begun at d22be34
    "worker.tune.progress": {"LiveTable"},
    "worker.tune.stall_guard": {"StallGuard"},
    "worker.tune.unplaceable_guard": {"UnplaceableGuard", "live_node_totals"},
    "worker.tune.tracking": {"TrackingTarget"},
    "worker.tune.tuning": {"AloneAfterOom", "TrialResolver", "trial_name"},
}  # the trainable is not among them: each attempt hands it to Tuner.restore afresh
OURS = ("worker.", "smart_core.", "service.", "bench.", "cli.", "smartune.")


class _Recorder(pickle.Unpickler):
    """Unpickles for real and notes every global of ours that the stream names."""

    def __init__(self, data: bytes, seen: set[tuple[str, str]]) -> None:
        super().__init__(io.BytesIO(data))
        self.seen = seen

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith(OURS):
            self.seen.add((module, name))
        return super().find_class(module, name)


def _blobs(value: Any) -> list[bytes]:
    """The cloudpickled values inside Tune's JSON state (`{"_type": "CLOUDPICKLE_FALLBACK", "value": hex}`)."""
    if isinstance(value, dict):
        found = [bytes.fromhex(value["value"])] if value.get("_type") == "CLOUDPICKLE_FALLBACK" else []
        return found + [b for v in value.values() for b in _blobs(v)]
    if isinstance(value, list):
        return [b for v in value for b in _blobs(v)]
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            return _blobs(json.loads(value))
        except ValueError:
            return []
    return []


def assert_only_pinned_paths(folder: Path) -> None:
    """The experiment folder's Tune state (`tuner.pkl`, `experiment_state-*.json`) names only pinned paths
    of ours. Called on a real sweep's folder by tests/worker/tune/test_sweep.py."""
    streams = [(folder / "tuner.pkl").read_bytes()]
    for state in folder.glob("experiment_state-*.json"):
        streams += _blobs(json.loads(state.read_text()))
    seen: set[tuple[str, str]] = set()
    for data in streams:
        _Recorder(data, seen).load()
    named = {(module, name) for module, names in PICKLED.items() for name in names}
    assert seen, "no pickled state of ours found: has Tune changed where it keeps it?"
    assert seen <= named, f"pickled but not pinned (add them to PICKLED): {sorted(seen - named)}"


@pytest.mark.parametrize(("module", "name"), sorted((m, n) for m, names in PICKLED.items() for n in names))
def test_every_pinned_path_still_resolves(module: str, name: str) -> None:
    assert hasattr(importlib.import_module(module), name), f"{module}.{name}: keep an alias where it was"


def test_a_trial_config_saved_before_a_field_was_renamed_still_resolves() -> None:
    """Tune's experiment state keeps each trial's config as the driver gave it; the next attempt of a job
    resumes those configs, so a renamed trial field is still read under its old name (TrainConfig's
    RENAMED: `method_overrides` is `method_params` now)."""
    from worker.tune.tuning import TrialResolver

    saved = {"train": {"task": "rte", "model": "tiny-random", "method": "smart", "epochs": 2, "seed": 3,
                       "method_overrides": {"lambda_s": 3.0}},
             "sampled": {"epsilon": 1e-4}}  # fmt: skip
    trial = TrialResolver(("lambda_s", "epsilon"))("t1", saved)
    assert trial.config.method_params == {"epsilon": 1e-4, "lambda_s": 3.0} and trial.planned_epochs == 2
    assert trial.config.method_config().lambda_s == 3.0 and trial.cell == {"lambda_s": 3.0, "epsilon": 1e-4}
