"""A spec that names a preset travels to the driver as canonical JSON and must mean the same trials
there: the preset's defaults (the paper grid's 6 epochs of Adam, the quick preset's 1 epoch) must not be
hidden by the training defaults a plain dump writes out."""

from __future__ import annotations

import itertools

import pytest

from worker.contract.presets import SEARCH_PRESETS
from worker.contract.spec import JobSpec

METHODS = [None, "smart", "vanilla", "r3f", "smart-renorm", "smart-breg-only"]


@pytest.mark.parametrize(("preset", "method"), itertools.product(sorted(SEARCH_PRESETS), METHODS))
@pytest.mark.parametrize("training", [{}, {"epochs": 2}, {"optimizer": "radam", "batch_size": 8}])
def test_the_canonical_json_means_the_same_trials(preset: str, method: str | None, training: dict) -> None:
    document = {
        "task": "rte",
        "model": "tiny-random",
        "search_space": {"preset": preset},
        "training": training,
    }
    if method:
        document["method"] = method
    try:
        spec = JobSpec.model_validate(document)
    except ValueError:
        pytest.skip("a combination the contract refuses anyway")
    again = JobSpec.model_validate_json(spec.canonical_json())
    assert again.base_values() == spec.base_values()
    assert again.trials() == spec.trials()
    assert again.canonical_json() == spec.canonical_json()


def test_the_paper_grid_keeps_its_recipe_at_the_driver() -> None:
    spec = JobSpec.model_validate({"task": "rte", "search_space": {"preset": "smart-paper-grid"}})
    at_driver = JobSpec.model_validate_json(spec.canonical_json()).base_values()
    assert (at_driver["epochs"], at_driver["optimizer"]) == (6, "adam")
    quick = JobSpec.model_validate(
        {"task": "rte", "search_space": {"preset": "quick"}, "training": {"batch_size": 8}}
    )
    assert JobSpec.model_validate_json(quick.canonical_json()).base_values()["epochs"] == 1


def test_the_domain_adaptation_preset_is_four_nested_fractions_per_method() -> None:
    """Paper Section 5.4: 0.1%, 1%, 10%, 100% of the training data, one fixed sampling seed, so the cells of
    one fraction differ only in method and seed (the summary's cells are then the per-fraction report)."""
    spec = JobSpec.model_validate(
        {"task": "rte", "search_space": {"preset": "domain-adaptation"}, "seeds": [1, 2, 3]}
    )
    trials = spec.trials()
    assert len(trials) == 4 * 2 * 3
    assert {t["train_fraction"] for t in trials} == {0.001, 0.01, 0.1, 1.0}
    assert {t["method"] for t in trials} == {"vanilla", "smart"}
    assert {t["fraction_seed"] for t in trials} == {13}
    pinned = JobSpec.model_validate(
        {"task": "rte", "search_space": {"preset": "domain-adaptation"}, "training": {"fraction_seed": 7}}
    )
    assert {t["fraction_seed"] for t in pinned.trials()} == {7}
