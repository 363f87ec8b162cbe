"""examples/custom_function/: its spec validates as a function job, and its function runs through the
reporter (a fake Tune behind it), reproducibly once seeded, and fails as the user's when it should."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from worker.contract.errors import UserFunctionError, diagnose
from worker.contract.specfile import spec_from_file
from worker.contract.trial import TrainConfig
from worker.tune.user_function import Reporter, call_function, load_function, user_config

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "custom_function" / "linear_probe.yaml"


def run(features: int) -> list[dict[str, float]]:
    spec = spec_from_file(EXAMPLE)
    assert spec.function is not None and spec.function.metric == "accuracy"
    config = TrainConfig.from_dict(spec.trials()[0])
    sent: list[dict[str, float]] = []
    reporter = Reporter(
        spec.function.metric, spec.function.mode, lambda m, f: sent.append(m), lambda m, e: None
    )
    torch.manual_seed(config.seed)  # as the trial seeds it (worker.training.session.seed_everything)
    call_function(
        load_function(spec.function.entrypoint), user_config(config, {"features": features}), reporter, []
    )
    return sent


def test_the_example_spec_is_a_four_trial_function_job() -> None:
    spec = spec_from_file(EXAMPLE)
    assert spec.trial_count() == 4 and spec.function_grid() == [{"features": 8}, {"features": 16}]


def test_the_example_function_reports_each_epoch_and_repeats_exactly() -> None:
    first = run(8)
    assert [m["epoch"] for m in first] == [1.0, 2.0, 3.0]
    assert all(0.0 <= m["accuracy"] <= 1.0 and m["score"] == m["accuracy"] for m in first)
    assert run(8) == first  # what an audit's re-run relies on


def test_the_example_function_fails_as_the_users() -> None:
    with pytest.raises(UserFunctionError) as info:
        run(0)
    assert diagnose(info.value) == (
        "user",
        "UserFunctionError: ValueError: features must be at least 1, got 0",
    )
