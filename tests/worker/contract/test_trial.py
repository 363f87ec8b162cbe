"""The trial's fields declared once: bounds, the spec's training block, the sweepable axes, and a trial
resolved once from its values."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from worker.contract.grid import SWEEPABLE, cell_key, resolve
from worker.contract.spec import JobSpec, Training
from worker.contract.trial import KNOBS, TrainConfig, recorded_values


@pytest.mark.parametrize(
    ("field", "value"),
    [("epochs", 0), ("epochs", 101), ("learning_rate", 0.0), ("learning_rate", 1.0), ("batch_size", 0),
     ("warmup_fraction", 1.0), ("max_seq_length", 4), ("train_fraction", 0.0), ("num_threads", 0),
     ("learning_rate", float("nan")), ("max_skipped_steps", 0), ("validation_fraction", 1.0),
     ("validation_fraction", -0.1)],
)  # fmt: skip
def test_one_set_of_bounds_for_the_trial_and_the_spec(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"invalid value for {field}"):
        TrainConfig(**{field: value})  # type: ignore[arg-type]
    if KNOBS[field].spec:
        with pytest.raises(ValidationError):
            Training(**{field: value})
    else:
        assert field not in Training.model_fields


def test_the_spec_training_block_is_derived_from_the_declaration() -> None:
    assert set(Training.model_fields) == {name for name, knob in KNOBS.items() if knob.spec}
    defaults = TrainConfig()
    for name, info in Training.model_fields.items():
        assert info.default == getattr(defaults, name) and info.description == KNOBS[name].help
    # Machine-level knobs are the deployment's, not a tenant's axis.
    assert not {"num_threads", "device", "compile", "pad_to", "data", "model"} & SWEEPABLE
    with pytest.raises(ValidationError, match="cannot sweep num_threads"):
        JobSpec.model_validate(
            {"task": "rte", "search_space": {"axes": {"num_threads": {"values": [1, 512]}}}}
        )


def test_a_trial_is_resolved_once_with_its_cell() -> None:
    trial = resolve(
        {"task": "rte", "method": "vanilla", "seed": 3, "epochs": 2},
        {"lambda_s": 2.0},
        ("method", "lambda_s"),
    )
    assert (
        trial.seed == 3
        and trial.planned_epochs == 2
        and trial.cell == {"method": "vanilla", "lambda_s": None}
    )
    assert (
        trial.label == "method=vanilla,lambda_s=None"
        and cell_key(trial.cell) == '{"lambda_s": null, "method": "vanilla"}'
    )


def test_the_plan_is_expanded_once_and_the_spec_cannot_change_under_it() -> None:
    spec = JobSpec.model_validate({"task": "rte", "search_space": {"preset": "quick"}})
    first = spec.trials()
    first[0]["epochs"] = 99  # a caller's copy
    assert spec.trials()[0]["epochs"] != 99
    with pytest.raises(ValidationError):
        spec.seeds = [1, 2]  # type: ignore[misc]


def test_rows_are_sampled_at_random_unless_a_record_predates_the_choice() -> None:
    assert TrainConfig().sampling == "random" and TrainConfig().validation_fraction == 0.0
    with pytest.raises(ValueError, match="invalid value for sampling"):
        TrainConfig(sampling="first")  # type: ignore[arg-type]
    recorded = TrainConfig(max_train_samples=1000).to_dict()
    del recorded["sampling"]  # as a trial's values were recorded before `sampling` existed
    assert resolve(recorded, None, ()).config.sampling == "head"  # Tune's state of an older experiment
    assert TrainConfig.from_dict(recorded_values(recorded)).sampling == "head"  # what an audit re-runs
    assert resolve(TrainConfig().to_dict(), None, ()).config.sampling == "random"
    assert "sampling" in SWEEPABLE and "validation_fraction" not in SWEEPABLE  # one selection rule per job
