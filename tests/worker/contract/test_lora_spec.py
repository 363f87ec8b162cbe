"""The spec's `peft` block (worker.contract.lora) and `training.padding_side`: validated naming the field,
carried into every trial, absent from the canonical JSON when unset (older specs keep their hash), refused
with multitask (over REST: tests/service/test_lora_api.py)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from worker.contract.spec import JobSpec
from worker.contract.trial import TrainConfig, recorded_values

LORA = {"method": "lora", "r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}


def _spec(**changes: Any) -> JobSpec:
    return JobSpec.model_validate({"task": "rte", "model": "tiny-random-llama", **changes})


def test_every_trial_carries_the_block_with_its_defaults() -> None:
    trials = _spec(
        peft=LORA, search_space={"axes": {"learning_rate": {"type": "grid", "values": [1e-4, 1e-3]}}}
    ).trials()
    assert len(trials) == 2
    assert all(t["peft"] == {**LORA, "dropout": 0.0} for t in trials)
    assert TrainConfig.from_dict(trials[0]).peft == trials[0]["peft"]


def test_unset_it_is_absent_from_the_canonical_json() -> None:
    plain = _spec()
    assert '"peft"' not in plain.canonical_json() and plain.trials()[0]["peft"] is None
    assert '"peft":{"alpha":8' in _spec(peft=LORA).canonical_json()
    assert _spec(peft=LORA).spec_hash() != plain.spec_hash()


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ({"r": 0}, "r"),
        ({"method": "ia3"}, "method"),
        ({"alpha": -1}, "alpha"),
        ({"dropout": 1}, "dropout"),
        ({"target_modules": []}, "target_modules"),
        ({"target_modules": ["q proj"]}, "target_modules"),
        ({"target_modules": ["q_proj", "q_proj"]}, "target_modules"),
        ({"rank": 8}, "rank"),
    ],  # fmt: skip
)
def test_a_mistake_names_its_field(block: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        _spec(peft=block)
    assert caught.value.errors()[0]["loc"][:2] == ("peft", field)


def test_multitask_refuses_lora() -> None:
    with pytest.raises(ValidationError, match="multitask: peft is not supported"):
        _spec(task=["rte", "mrpc"], multitask={"sampling": "round-robin"}, peft=LORA)


def test_padding_side_is_a_training_field_and_old_records_pad_right() -> None:
    assert _spec(training={"padding_side": "left"}).trials()[0]["padding_side"] == "left"
    assert '"padding_side":"left"' in _spec(training={"padding_side": "left"}).canonical_json()
    default = _spec()  # absent from the canonical JSON at its default: older specs keep their hash
    assert '"padding_side"' not in default.canonical_json() and default.trials()[0]["padding_side"] == "auto"
    with pytest.raises(ValidationError, match="padding_side"):
        _spec(training={"padding_side": "middle"})
    assert recorded_values({"task": "rte"})["padding_side"] == "right"  # what every run before it did
