"""repro-v2's pieces (issue 29): the epoch chosen on validation rows and reported on dev, the campaign's
held-out rows and unreported grid seeds, and the radius x λ_s cells with their ascent check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from research.reproduction import direct, plan, radius, report
from research.reproduction.collect import choose
from research.reproduction.selection import chosen_index, selected, subsets_label
from worker.contract.trial import TrainConfig


def test_the_reported_epoch_is_chosen_on_validation_and_scored_on_dev() -> None:
    dev, validation = [60.0, 70.0, 65.0, 72.0], [50.0, 58.0, 58.0, 55.0]
    got = selected(dev, validation)
    # validation's best is epoch 2 (its first maximum), so dev is read there: not dev's own best, 72
    assert got == {"value": 70.0, "selected_epoch": 2, "selection_value": 58.0, "selected_on": "validation",
                   "best_dev": 72.0, "last_value": 72.0}  # fmt: skip
    on_dev = selected(dev, None)
    assert (on_dev["value"], on_dev["selected_epoch"], on_dev["selected_on"]) == (72.0, 4, "dev")
    assert chosen_index([1.0, 3.0, 3.0]) == 1
    with pytest.raises(ValueError, match="3 validation points for 4 dev points"):
        selected(dev, validation[:3])
    with pytest.raises(ValueError, match="no epoch"):
        chosen_index([])


def test_the_v2_campaign_holds_rows_out_and_chooses_its_grid_on_unreported_seeds() -> None:
    training = plan.CAMPAIGN.training
    assert training["max_train_samples"] * (1 - training["validation_fraction"]) == pytest.approx(1000)
    assert training["sampling"] == "random" and plan.CAMPAIGN.name == "repro-v2"
    assert not set(plan.GRID_SEEDS) & set(plan.SEEDS)
    trials = direct.trial_configs(plan.CAMPAIGN, ["rte"], learning_rate=5e-5, epochs=10, train_examples=1000,
                                  overrides={})  # fmt: skip
    config = TrainConfig.from_dict({k: v for k, v in trials[0].items() if not k.startswith("_")})
    assert (config.max_train_samples, config.validation_fraction) == (1250, 0.2)
    assert "stratified random 1250 rows" in subsets_label(
        trials[0]
    ) and "20% of them held out" in subsets_label(trials[0])
    # the grid chooses on what the validation rows said, not on dev
    grid = [{"method": "grid-full", "task": "rte", "learning_rate": lr, "planned_epochs": 2, "epochs": 2,
             "value": dev, "selection_value": held} for lr, dev, held in ((1e-4, 80.0, 50.0), (5e-5, 60.0, 55.0))]  # fmt: skip
    assert choose(grid)["learning_rate"] == 5e-5


def test_the_radius_cells_put_the_ascent_on_the_balls_face() -> None:
    assert len(plan.RADIUS_METHODS) == len(plan.RADII) * len(plan.RADIUS_LAMBDAS)
    assert len(set(plan.RADIUS_LABELS)) == len(plan.RADIUS_LABELS) and not set(plan.RADIUS_LABELS) & set(
        plan.METHOD_LABELS
    )
    for method in plan.RADIUS_METHODS:
        p = method.params
        assert (
            p["sigma"] == p["epsilon"] and p["eta"] == pytest.approx(100 * p["epsilon"]) and p["lambda_s"] > 0
        )
        assert method.label == plan.radius_label(p["epsilon"], p["lambda_s"])
    campaign = plan.Campaign(methods=plan.RADIUS_METHODS[:1])
    trials = direct.trial_configs(campaign, ["stsb"], learning_rate=5e-5, epochs=2, train_examples=1000,
                                  overrides={})  # fmt: skip
    config = TrainConfig.from_dict({k: v for k, v in trials[0].items() if not k.startswith("_")})
    resolved = config.method_config()
    assert (resolved.epsilon, resolved.sigma, resolved.eta, resolved.projection) == (
        1e-3,
        1e-3,
        pytest.approx(0.1),
        "ball",
    )


def test_every_seed_runs_the_two_sweeps_and_two_seeds_screen_the_corners() -> None:
    """The λ_s sweep at the radius that acts and the radius sweep at λ_s = 1 on every seed; the corners
    (ε 1e-3 and 1e-1 at λ_s 0.1 and 10) on the screen's seeds, and none of them when only others are asked;
    the deciding cells (the baselines, λ_s 1 at the radius that acts) on ten seeds, none of them the grid's."""
    campaign = plan.Campaign(methods=plan.RADIUS_PLAN, seeds=plan.RADIUS_PLAN_SEEDS)
    trials = direct.trial_configs(campaign, ["stsb"], learning_rate=5e-5, epochs=2, train_examples=1000,
                                  overrides={})  # fmt: skip
    seeds: dict[str, set[int]] = {}
    for trial in trials:
        seeds.setdefault(trial["_method"], set()).add(trial["seed"])
    ten = set(plan.SEEDS + plan.DECIDING_SEEDS)
    assert len(ten) == 10 and not ten & set(plan.GRID_SEEDS)
    for label in plan.RADIUS_BASELINES:
        assert seeds[label] == ten, label
    for method in plan.RADIUS_METHODS:
        eps, lam = method.params["epsilon"], method.params["lambda_s"]
        expected = (ten if (eps, lam) == (plan.RADIUS_ACTS, 1.0)
                    else set(plan.SEEDS) if eps == plan.RADIUS_ACTS or lam == 1.0
                    else set(plan.RADIUS_SCREEN_SEEDS))  # fmt: skip
        assert seeds[method.label] == expected, method.label
    assert set(plan.DECIDING_LABELS) == {label for label, s in seeds.items() if s == ten}
    assert sum(map(len, seeds.values())) == 3 * 10 + 4 * 5 + 4 * 2
    later = plan.Campaign(methods=plan.RADIUS_PLAN, seeds=(3, 4))
    labels = {t["_method"] for t in direct.trial_configs(later, ["stsb"], learning_rate=5e-5, epochs=2,
                                                         train_examples=1000, overrides={})}  # fmt: skip
    assert labels == {m.label for m in plan.RADIUS_PLAN if m.seeds != plan.RADIUS_SCREEN_SEEDS}


def test_direct_radius_runs_the_plan_on_its_own_seeds(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`--methods radius` expands to the radius plan with each cell's planned seeds (the deciding ones
    included); `--seeds` keeps only those named; naming radius beside other rows is refused."""
    seen: list[plan.Campaign] = []

    def capture(campaign: plan.Campaign, *_: object, **__: object) -> list[dict[str, object]]:
        seen.append(campaign)
        return []

    monkeypatch.setattr(direct, "trial_configs", capture)
    monkeypatch.setattr(direct, "run", lambda *_: None)  # nothing to train: the plan is what is checked
    monkeypatch.setattr(direct, "table", lambda _: "")
    args = [
        "--out",
        str(tmp_path / "records.jsonl"),
        "--tasks",
        "stsb",
        "--learning-rate",
        "5e-5",
        "--epochs",
        "2",
        "--methods",
    ]
    direct.main([*args, "radius"])
    assert seen[-1].methods == plan.RADIUS_PLAN and seen[-1].seeds == plan.RADIUS_PLAN_SEEDS
    direct.main([*args, "radius", "--seeds", "9,10"])
    assert seen[-1].seeds == (9, 10)
    with pytest.raises(SystemExit):
        direct.main([*args, "radius,smart"])


def test_the_linearized_rows_differ_from_their_exact_twins_only_in_rs_arithmetic() -> None:
    """Issue 28's quality check pairs each linearised row with its exact twin, seed by seed."""
    assert plan.LINEARIZED_LABELS == ("smart-linearized", "smart-renorm-linearized")
    assert not set(plan.LINEARIZED_LABELS) & set(plan.METHOD_LABELS + plan.RADIUS_LABELS)
    campaign = plan.Campaign(methods=plan.LINEARIZED_METHODS + tuple(
        m for m in plan.METHODS if m.label in plan.LINEARIZED_BASELINES))  # fmt: skip
    trials = direct.trial_configs(campaign, ["stsb"], learning_rate=5e-5, epochs=2, train_examples=1000,
                                  overrides={})  # fmt: skip
    by_row: dict[tuple[str, int], Any] = {}
    for trial in trials:
        config = TrainConfig.from_dict({k: v for k, v in trial.items() if not k.startswith("_")})
        by_row[(trial["_method"], config.seed)] = config.method_config()
    for label in plan.LINEARIZED_BASELINES:
        for seed in plan.SEEDS:
            exact, linear = by_row[(label, seed)], by_row[(f"{label}-linearized", seed)]
            assert (exact.rs_arithmetic, linear.rs_arithmetic) == ("fp32", "linearized")
            assert linear.with_overrides(rs_arithmetic="fp32") == exact
    with pytest.raises(SystemExit):  # `--methods` names rows; an unknown one is refused before anything runs
        direct.main(["--out", "/dev/null", "--methods", "smart-linearised"])


def _radius_record(seed: int, value: float, method: str, linf: float, step: float = 50.0) -> dict[str, Any]:
    return {"task": "mrpc", "method": method, "seed": seed, "metric": "f1", "value": value,
            "components": {"delta_linf": [linf, linf], "step_to_noise": [step, step], "ascent_signal": [0.9],
                           "r_s": [2e-3, 3e-3], "r_s_control": [1e-6, 1e-6], "grad_ratio_rs": [0.05, 0.04]}}  # fmt: skip


def test_the_ascent_check_tells_an_adversary_from_the_noise() -> None:
    cell = plan.radius_label(1e-2, 1.0)
    acted = radius.ascent_check(_radius_record(1, 80.0, cell, linf=1e-2), 1e-2)
    assert acted["acted"] and acted["linf_over_eps"] == pytest.approx(1.0)
    assert not radius.ascent_check(_radius_record(1, 80.0, cell, linf=1e-3), 1e-2)["on_the_ball"]
    noise = radius.ascent_check(_radius_record(1, 80.0, cell, linf=1e-2, step=1e-6), 1e-2)
    assert not noise["acted"] and not noise["step_over_noise"]
    dropout = _radius_record(1, 80.0, cell, linf=1e-2)
    dropout["components"] |= {"ascent_signal": [-0.3]}
    assert not radius.ascent_check(dropout, 1e-2)["acted"]


def test_the_radius_section_compares_each_cell_with_vanilla_and_the_teacher_on_the_same_seeds() -> None:
    cell = plan.radius_label(1e-2, 1.0)
    records = [
        *(_radius_record(s, v, "vanilla", 0.0) for s, v in ((1, 80.0), (2, 82.0), (3, 81.0))),
        *(_radius_record(s, v, "smart-breg-only", 0.0) for s, v in ((1, 80.5), (2, 82.5), (3, 81.5))),
        *(_radius_record(s, v, cell, 1e-2) for s, v in ((1, 81.0), (2, 83.0), (3, 82.0))),
    ]
    text = "\n".join(radius.radius_section(records))
    assert "### mrpc (f1)" in text
    assert (
        "| 0.01 | 1 | 3 | 82.00 ± 1.00 | +1.00 [+1.00, +1.00], t 0.000, sign 0.25 | +0.50 [+0.50, +0.50], t 0.000, sign 0.25 "
        "| 3 of 3 |" in text
    )
    assert (
        "9 of 58 planned trials (the two baselines and 1 deciding cell on seeds 1-5 and 9-13, 4 cells on seeds "
        "1-5, 4 cells screened on seeds 1, 2); seeds run: 1, 2, 3; ran on " in text
    )  # how far the grid has run
    corner = plan.radius_label(1e-3, 10.0)  # screened on seeds 1 and 2: a third seed is counted apart
    more = [*records, *(_radius_record(s, 81.0, corner, 1e-3) for s in (1, 2, 3))]
    assert "11 of 58 planned trials" in "\n".join(radius.progress(more, "mrpc"))
    assert "and 1 beyond the plan; seeds run" in "\n".join(radius.progress(more, "mrpc"))
    assert "Vanilla: 81.00 ± 1.00 (n = 3). The teacher alone: 81.50 ± 1.00 (n = 3)." in text
    assert (
        "The teacher alone minus vanilla, paired over 3 seeds: +0.50 [+0.50, +0.50], t 0.000, sign 0.25, "
        "Wilcoxon 0.25." in text
    )  # the recommendation's own comparison, printed where its two rows' means are
    assert "ε ∈ {0.001, 0.01, 0.1}" in text and "{0.1, 1, 10}" in text  # the plan's grid, not a stale one
    assert radius.radius_section([r for r in records if r["method"] == "vanilla"]) == []
    assert "SMART at radii where R_s acts" in report.render([], [], radius=records)
