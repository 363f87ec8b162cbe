"""The report's statistics and the equal-compute planner: the t interval covers what it says at 5 seeds, the
exact tests give their textbook values, and the arms' arithmetic (issue 29)."""

from __future__ import annotations

import pytest
from scipy import stats as scipy_stats

from research.reproduction import budget
from research.reproduction.coverage import simulate, t_coverage
from research.reproduction.exact import sign_test, smallest_exact_p, wilcoxon_signed_rank
from research.reproduction.plan import CAMPAIGN
from research.reproduction.stats import paired, t_interval


@pytest.mark.parametrize("effect", [0.0, 0.7])
def test_the_t_interval_covers_95_percent_at_five_seeds(effect: float) -> None:
    # 4,000 simulated five-seed comparisons (N(effect, 1) per-seed differences, fixed RNG): the report's own
    # interval code. The binomial sd of a 95% coverage over 4,000 samples is 0.0034: [0.93, 0.97] is > 5 sd.
    diffs = simulate(5, 4000, effect, seed=29)
    assert 0.93 <= t_coverage(diffs, effect) <= 0.97


def test_the_old_bootstrap_undercovers_on_the_same_simulation() -> None:
    from research.reproduction.coverage import bootstrap

    diffs = simulate(5, 1000, 0.0, seed=29)
    low, high, p = bootstrap(diffs, draws=2000)
    assert ((low <= 0) & (0 <= high)).mean() < 0.9  # ~84%: why the report left it
    assert (p < 0.05).mean() > 0.1  # ~16% false positives at a nominal 5%


def test_the_paired_interval_is_the_vectorised_one() -> None:
    method, base = [71.0, 69.5, 74.0, 70.0, 72.5], [70.0, 68.0, 72.0, 70.5, 70.0]
    result = paired(method, base)
    low, high = t_interval([m - b for m, b in zip(method, base, strict=True)])
    assert (result.low, result.high) == pytest.approx((float(low), float(high)))
    assert result.p_t == pytest.approx(scipy_stats.ttest_rel(method, base).pvalue)


def test_the_sign_tests_smallest_p_at_five_seeds_is_0_0625() -> None:
    assert sign_test([0.5, 1.0, 2.0, 0.1, 3.0]) == pytest.approx(0.0625)
    assert sign_test([-0.5, -1.0, -2.0, -0.1, -3.0]) == pytest.approx(0.0625)
    assert (
        smallest_exact_p(5) == pytest.approx(0.0625)
        and paired([1, 2, 3, 4, 6], [0] * 5).smallest_exact_p == 0.0625
    )
    assert sign_test([1.0, -1.0, 2.0, 3.0, 4.0]) == pytest.approx(12 / 32)  # 2 * P(X <= 1), n 5
    assert sign_test([1.0, 0.0, 2.0, 3.0, 4.0]) == pytest.approx(0.125)  # the zero dropped: n 4
    assert sign_test([0.0, 0.0]) == 1.0


def test_wilcoxon_matches_its_table_values() -> None:
    # The critical values of the two-sided 5% test: T <= 8 at n = 10 (p 50/1024), T <= 2 at n = 7 (6/128)
    n10 = [-r if r in (1, 3, 4) else r for r in range(1, 11)]  # negative ranks sum to 8
    assert wilcoxon_signed_rank(n10) == pytest.approx(50 / 1024)
    assert wilcoxon_signed_rank([-r if r in (2, 3, 4) else r for r in range(1, 11)]) == pytest.approx(
        66 / 1024
    )
    assert wilcoxon_signed_rank([-2.0 if r == 2 else float(r) for r in range(1, 8)]) == pytest.approx(6 / 128)
    assert wilcoxon_signed_rank([0.3, 1.2, 2.2, 0.7, 4.0]) == pytest.approx(0.0625)  # all one way at n = 5
    assert wilcoxon_signed_rank([0.0] * 3) == 1.0
    # tied |d| at mid-ranks 1.5, 1.5, 3, 4: W+ = 8.5; 3 of the 16 sign patterns reach it, so p = 6/16
    assert wilcoxon_signed_rank([1.0, -1.0, 2.0, 3.0]) == pytest.approx(0.375)
    # float noise in a difference of rounded scores is not a tie-breaker: 0.1 + 0.2 ties with 0.3
    assert wilcoxon_signed_rank([0.1 + 0.2, -0.3, 1.0]) == wilcoxon_signed_rank([0.3, -0.3, 1.0])
    untied = [0.4, -1.3, 2.1, 0.9, 1.7, -0.2, 3.3, 0.6]
    assert wilcoxon_signed_rank(untied) == pytest.approx(scipy_stats.wilcoxon(untied, method="exact").pvalue)


def test_equal_wall_time_trains_the_epochs_the_budget_buys() -> None:
    assert budget.equal_time_epochs(10, 2.4) == 4  # 10 / 2.4 = 4.17
    assert budget.equal_time_epochs(10, 2.5) == 4  # exactly 4, not 3 by rounding
    assert budget.equal_time_epochs(10, 1.23) == 8
    assert budget.equal_time_epochs(10, 0.7) == 14  # a cheaper method gets more epochs
    assert budget.equal_time_epochs(3, 12.7) == 1  # at least one epoch
    with pytest.raises(ValueError):
        budget.equal_time_epochs(10, 0.0)


def test_equal_updates_matches_vanillas_optimizer_steps() -> None:
    assert budget.updates_per_epoch(1000, 32) == 32 and budget.updates_per_epoch(2490, 32) == 78
    assert budget.equal_updates_epochs(10, 32, 32) == 10  # one update per batch, same batch: same epochs
    assert budget.equal_updates_epochs(10, 32, 16) == 20  # half the updates per epoch: twice the epochs
    assert budget.equal_updates_epochs(10, 32, 640) == 1


def test_the_cut_scores_smart_at_two_thirds_of_its_peak_rate_and_the_arm_decays_it() -> None:
    # 10 epochs x 32 updates, 10% warm-up: after 4 epochs the rate is (320 - 127) / 288 of peak
    assert budget.lr_share(4, 10, 32, 0.1) == pytest.approx(193 / 288)
    assert budget.lr_share(10, 10, 32, 0.1) == pytest.approx(1 / 288)  # a whole schedule ends near 0
    assert budget.lr_share(4, 4, 32, 0.1) == pytest.approx(1 / (128 - 12))  # the arm: its own decay
    assert budget.lr_share(0, 10, 32, 0.1) == pytest.approx(1 / 32)  # the first warm-up step


def test_both_arms_are_planned_from_the_measured_cost() -> None:
    time_arm, updates_arm = budget.plan_arms(
        "smart", vanilla_epochs=10, vanilla_epoch_s=2.5, ratio=2.4, vanilla_per_epoch=32
    )
    assert (time_arm.arm, time_arm.epochs, time_arm.updates) == ("equal-time", 4, 128)
    assert time_arm.seconds == pytest.approx(4 * 6.0) and time_arm.seconds <= 10 * 2.5
    assert (updates_arm.arm, updates_arm.epochs, updates_arm.updates) == ("equal-updates", 10, 320)
    records = [
        {"task": "rte", "method": m, "epoch_seconds": [s] * 3}
        for m, s in (("vanilla", 3.0), ("smart", 7.5), ("smart-breg-only", 3.6))
    ]
    plans = budget.plan_task(records, "rte", vanilla_epochs=10, per_epoch=32)
    assert [(p.label, p.epochs) for p in plans] == [
        ("smart@equal-time", 4), ("smart@equal-updates", 10),
        ("smart-breg-only@equal-time", 8), ("smart-breg-only@equal-updates", 10),
    ]  # fmt: skip


def test_an_arm_is_a_methods_job_under_its_own_name_with_its_own_schedule() -> None:
    arm = budget.ArmPlan("smart", "equal-time", epochs=4, updates=128, seconds=24.0)
    spec = CAMPAIGN.budget_spec("rte", arm, learning_rate=5e-5)
    assert spec["name"] == "repro-v2/rte/smart@equal-time"
    assert CAMPAIGN.parse(spec["name"]) == ("rte", "smart@equal-time")
    assert spec["training"]["epochs"] == 4 and spec["training"]["warmup_fraction"] == 0.1
    assert spec["method_params"]["rs_dropout"] == "shared" and spec["seeds"] == [1, 2, 3, 4, 5]
    from worker.contract.spec import JobSpec

    trials = JobSpec.model_validate(spec).trials()  # the contract takes it as it takes the methods phase's
    assert {t["epochs"] for t in trials} == {4} and len(trials) == 5
