"""`search.algorithm: optuna`: Optuna's TPE proposes the sampled axes of one configuration under a
ConcurrencyLimiter, with ASHA beside it, on the real local Ray cluster; specs it cannot search are refused
with the field named."""

from __future__ import annotations

from typing import Any

import pytest

from worker.contract.spec import JobSpec
from worker.tune.settings import Settings
from worker.tune.sweep import run_sweep

pytestmark = pytest.mark.glue

LR = {"learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-2}}


def test_optuna_proposes_learning_rates_and_asha_runs_beside_it(
    ray_cluster: Any, sweep_settings: Settings, tiny_spec: Any
) -> None:
    document = tiny_spec(method="vanilla", method_params={}, search_space={"axes": LR},
                         search={"algorithm": "optuna", "num_samples": 3, "asha": {"grace_period": 1}},
                         training={"epochs": 2})  # fmt: skip
    summary = run_sweep(JobSpec.model_validate(document), job_id="optuna-3", settings=sweep_settings)
    finished = summary["trials_by_state"]["TERMINATED"] + summary["trials_by_state"]["STOPPED"]
    assert finished == 3 and summary["trials_by_state"]["ERROR"] == 0
    rates = {round(c["params"]["learning_rate"], 12) for c in summary["cells"]}
    assert len(rates) == 3 and all(1e-4 <= r <= 1e-2 for r in rates)


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"search_space": {"axes": {}}}, "needs at least one choice, uniform or loguniform axis"),
        ({"seeds": [1, 2]}, "the grid has 2 cells (axes seed)"),
        (
            {"search_space": {"axes": {**LR, "batch_size": {"type": "grid", "values": [8, 16]}}}},
            "axes batch_size",
        ),
    ],
)
def test_specs_optuna_cannot_search_are_refused(tiny_spec: Any, changes: dict[str, Any], said: str) -> None:
    document = (
        tiny_spec(search_space={"axes": LR}, search={"algorithm": "optuna", "num_samples": 2}) | changes
    )
    with pytest.raises(ValueError, match="search.algorithm") as refused:
        JobSpec.model_validate(document)
    assert said in str(refused.value)
