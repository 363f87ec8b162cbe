"""The reproduction campaign's pieces: the paired statistics, the equal-compute cut, the grid choice and the
report (the campaign end to end against a real server: tests/integration/test_reproduction_campaign.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from research.reproduction import report
from research.reproduction.collect import choose
from research.reproduction.plan import CAMPAIGN, METHODS, Campaign
from research.reproduction.stats import best_within, holm, paired, reading

BY_LABEL = {m.label: m for m in METHODS}


def test_the_paired_test_matches_its_textbook_values() -> None:
    result = paired([71.0, 69.0, 74.0, 70.0, 72.0], [70.0, 68.0, 72.0, 70.0, 70.0])
    # differences 1, 1, 2, 0, 2: mean 1.2, sd 0.837, t = 1.2 / (0.837 / sqrt 5) = 3.207 on 4 df
    assert result.mean == pytest.approx(1.2)
    assert result.p_t == pytest.approx(0.0327, abs=5e-4)
    # t_{0.975, 4} = 2.776: 1.2 ± 2.776 x 0.837 / sqrt 5 = [0.161, 2.239]
    assert (result.low, result.high) == pytest.approx((0.161, 2.239), abs=1e-3)
    # four positive of four nonzero: sign p 2/16; ranks of 1, 1, 2, 2 are 1.5, 1.5, 3.5, 3.5, all positive
    assert result.p_sign == pytest.approx(0.125) and result.p_wilcoxon == pytest.approx(0.125)
    assert reading(result) == "higher" and reading(result, 0.06) == "higher, not after Holm"
    flat = paired([1.0, 2.0], [1.0, 2.0])
    assert (flat.mean, flat.p_t, flat.low, flat.high) == (0.0, 1.0, 0.0, 0.0)
    assert reading(flat) == "no difference found"
    with pytest.raises(ValueError, match="at least 2"):
        paired([1.0], [0.0])


def test_holms_adjustment_matches_its_textbook_values() -> None:
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4 x 0.005, 3 x 0.01, 2 x 0.03, then max(0.06, 1 x 0.04)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0]) and holm([]) == []


def test_the_summary_adjusts_within_each_task_and_bolds_what_survives() -> None:
    from research.reproduction.sections import summary_rows

    steady = [0.1, 0.2, 0.3, 0.4, 0.5]  # minus vanilla per seed: mean 0.3, paired t p 0.013
    noisy = [3.0, -1.0, 2.0, 0.0, 1.0]  # mean 1.0, p 0.23
    diffs = {("rte", "r3f"): steady, ("rte", "smart"): noisy, ("mrpc", "smart"): steady}
    records = [
        _record(task, "vanilla", seed, 60.0 + seed) for task in ("rte", "mrpc") for seed in range(1, 6)
    ]
    records += [
        _record(task, method, seed, 60.0 + seed + d[seed - 1])
        for (task, method), d in diffs.items()
        for seed in range(1, 6)
    ]
    rows = summary_rows(records, ["rte", "mrpc"])
    assert rows[0] == "| method | rte | mrpc |"
    # rte's family has two comparisons: its smallest p doubles; mrpc's has one: unchanged
    assert "| r3f | **+0.30 [+0.10, +0.50] (p 0.013; Holm 0.026)** | – |" in rows
    assert (
        "| smart | +1.00: no difference found (95% CI [-0.96, +2.96]; p 0.230; Holm 0.230) "
        "| **+0.30 [+0.10, +0.50] (p 0.013; Holm 0.013)** |"
    ) in rows
    assert not any("match" in row or "equivalent" in row for row in rows)


def test_the_old_cut_schedule_takes_the_best_epoch_that_ended_within_the_budget() -> None:
    curve, seconds = [50.0, 70.0, 65.0, 80.0], [10.0, 10.0, 10.0, 10.0]
    assert best_within(curve, seconds, 35.0) == 70.0
    assert best_within(curve, seconds, 40.0) == 80.0
    assert best_within(curve, seconds, 9.0) is None


def _record(
    task: str, method: str, seed: int, value: float, lr: float = 1e-4, epochs: int = 2
) -> dict[str, Any]:
    return {
        "task": task,
        "method": method,
        "seed": seed,
        "metric": "accuracy",
        "value": value,
        "epochs": epochs,
        "planned_epochs": epochs,
        "learning_rate": lr,
        "wall_s": 20.0 * epochs,
        "curve": [value - 5.0, value][-epochs:],
        "epoch_seconds": [20.0] * epochs,
        "train_loss": [0.7, 0.6][-epochs:],
        "components": {"task_loss": [0.7, 0.6], "r_s": [1e-10, 1e-10], "d_breg": [1e-3, 2e-3]}
        if "smart" in method
        else {},
        "mlflow_run_id": f"run-{task}-{method}-{seed}",
    }


def test_the_grid_choice_averages_seeds_then_tasks_and_ignores_unfinished_cells() -> None:
    records = [
        _record("rte", "grid-full", 1, 60.0, lr=1e-4),
        _record("rte", "grid-full", 2, 64.0, lr=1e-4),
        _record("cola", "grid-full", 1, 30.0, lr=1e-4),
        _record("rte", "grid-full", 1, 70.0, lr=5e-5),
        _record("cola", "grid-full", 1, 20.0, lr=5e-5),  # mean over tasks 45 vs 46 for 1e-4
        {**_record("rte", "grid-full", 1, 99.0, lr=2e-5), "epochs": 1},  # stopped early: not a finished cell
    ]
    chosen = choose(records)
    assert (chosen["learning_rate"], chosen["epochs"], chosen["score"]) == (1e-4, 2, 46.0)
    with pytest.raises(LookupError, match="grid"):
        choose([])


def test_the_report_puts_paired_differences_and_the_papers_numbers_side_by_side(tmp_path: Path) -> None:
    records = [
        _record("rte", method, seed, value + bump)
        for seed, value in ((1, 60.0), (2, 62.0), (3, 58.0))
        for method, bump in (("vanilla", 0.0), ("smart", 1.0), ("smart-breg-only", -1.0))
    ]
    page = report.render(records, [])
    rte = page[page.index("### rte") :]
    # every seed +1 (sd 0): the t interval is the point; sign and Wilcoxon 2 / 2^3
    assert (
        "| smart | 3 | 61.00 ± 2.00 | +1.00 [+1.00, +1.00] | 0.000 (0.000) | 0.25 | 0.25 | higher | 71.2 |"
        in rte
    )
    assert "| vanilla | 3 | 60.00 ± 2.00 | – | – | – | – | – | 63.5 |" in rte
    assert "cannot give a two-sided p below 0.25" in page  # 3 seeds: the exact tests' floor, said
    assert "cut schedule (old)" in page and "paired bootstrap]" not in page and "bootstrap p |" not in page
    assert "_Training examples (subsets): file-order (first N rows)." in page
    assert "| rte | smart | 6.50e-01 | 1.00e-10 |" in page  # the regulariser's components, per method
    assert "| task | vanilla | smart |" in page  # one trial per CPU thread: no sharing column


def test_the_learning_curves_plot_renders(tmp_path: Path, starts_processes: None) -> None:
    """Integration tier: matplotlib's font manager runs `fc-list` when it first builds its font cache (a
    fresh environment with fontconfig installed), which the unit tier's guard refuses."""
    records = [
        _record("rte", method, seed, 60.0 + seed) for seed in (1, 2) for method in ("vanilla", "smart")
    ]
    report.plot(records, tmp_path / "curves.png", "training minutes")
    assert (tmp_path / "curves.png").stat().st_size > 10_000


def test_the_gpu_records_get_their_own_section_with_the_same_tables() -> None:
    def record(method: str, seed: int, value: float) -> dict[str, object]:
        return {"task": "rte", "method": method, "seed": seed, "metric": "accuracy", "value": value,
                "epochs": 2, "wall_s": 2.0, "curve": [value - 1, value], "epoch_seconds": [1.0, 1.0],
                "train_loss": [0.6, 0.5], "components": {}, "device": "NVIDIA H200",
                "concurrent_trials": 6 + (seed == 3)}  # fmt: skip

    gpu = [record(m, s, 55.0 + s + (m == "smart")) for s in (1, 2, 3) for m in ("vanilla", "smart")]
    page = report.render([], [], gpu)
    cpu_part, gpu_part = page.split("## On a lent GPU (NVIDIA H200), direct runs")
    assert "_No method has run yet._" in cpu_part  # the service's campaign has no method records
    assert (
        "| smart | 3 | 58.00 ± 1.00 | +1.00 [+1.00, +1.00] | 0.000 (0.000) | 0.25 | 0.25 | higher | 71.2 |"
        in gpu_part
    )
    assert "| task | trials at once | vanilla |" in gpu_part and "| rte | 6–7 | 1.0 s (1.00x) |" in gpu_part
    assert "Step cost: median training seconds per epoch (1,000 examples" in gpu_part  # the records' default
    whole = [{**r, "train_examples": 2490} for r in gpu]
    page = report.render([], [], gpu, whole)
    gpu_part, whole_part = page.split("## On a lent GPU, the full training sets")
    assert "every training example (rte 2490)" in whole_part
    assert (
        "| smart | 3 | 58.00 ± 1.00 | +1.00 [+1.00, +1.00] | 0.000 (0.000) | 0.25 | 0.25 | higher | 71.2 |"
        in whole_part
    )
    assert "(2,490 examples, one GPU shared by several trials)" in whole_part


def test_the_campaigns_names_round_trip() -> None:
    name = CAMPAIGN.job_name("stsb", "smart-renorm")
    assert CAMPAIGN.parse(name) == ("stsb", "smart-renorm")
    assert CAMPAIGN.parse("other/stsb/smart") is None
    assert Campaign(name="x").parse(name) is None
    spec = CAMPAIGN.method_spec("rte", BY_LABEL["smart"], learning_rate=1e-4, epochs=10)
    assert spec["method_params"]["rs_dropout"] == "shared" and spec["training"]["length_grouping"] is False


def test_the_grid_section_says_what_asha_saved_and_whether_it_kept_the_best_cell() -> None:
    full = [
        _record("cola", "grid-full", 1, 11.0, lr=5e-5, epochs=2),
        _record("cola", "grid-full", 1, 9.0, lr=1e-4, epochs=2),
    ]
    asha = [
        {
            **_record("cola", "grid-asha", 1, 0.0, lr=5e-5, epochs=2),
            "epochs": 1,
            "wall_s": 20.0,
        },  # cut at rung 1
        _record("cola", "grid-asha", 1, 9.0, lr=1e-4, epochs=2),
    ]
    text = "\n".join(report.grid_section(full + asha))
    assert "ASHA ran 3 of the full grid's 4 epochs (25% fewer; training time 25% less)" in text
    assert "best cell (mean over seeds): lr 5e-05 x 2 epochs" in text and "the same cell: **no**" in text


def _trial(method: str, state: str, task: str = "stsb", value: float = 80.0) -> dict[str, Any]:
    return {"task": task, "method": method, "seed": 1, "learning_rate": 5e-5, "planned_epochs": 10,
            "state": state, "value": value}  # fmt: skip


def test_only_finished_method_trials_reach_the_records(tmp_path: Path) -> None:
    from research.reproduction.collect import write

    records = [_trial("vanilla", "TERMINATED"), _trial("smart", "RUNNING"), _trial("grid-asha", "STOPPED")]
    write(records, tmp_path / "methods.json", tmp_path / "grid.json")

    assert [r["method"] for r in json.loads((tmp_path / "methods.json").read_text())] == ["vanilla"]
    assert [r["state"] for r in json.loads((tmp_path / "grid.json").read_text())] == [
        "STOPPED"
    ]  # ASHA's cuts stay


def test_collecting_from_a_new_store_keeps_the_other_machines_records(tmp_path: Path) -> None:
    """A later session's MLflow store holds only its own trials: writing them replaces the same trials'
    records and keeps every other one."""
    from research.reproduction.collect import write

    methods, grid = tmp_path / "methods.json", tmp_path / "grid.json"
    earlier = [_trial("vanilla", "TERMINATED", "rte"), _trial("vanilla", "TERMINATED", value=70.0)]
    methods.write_text(json.dumps(earlier))
    write([_trial("vanilla", "TERMINATED", value=81.0), _trial("smart", "TERMINATED")], methods, grid)
    rows = json.loads(methods.read_text())
    assert [(r["task"], r["method"], r["value"]) for r in rows] == [
        ("rte", "vanilla", 80.0),
        ("stsb", "vanilla", 81.0),
        ("stsb", "smart", 80.0),
    ]


class _Jobs:
    """What `submit_all` uses of `smartune.Client`: a job list (newest first), submit by key, retry."""

    def __init__(self, jobs: list[dict[str, Any]]) -> None:
        self.listed = jobs
        self.keys: dict[str, str] = {}  # idempotency key -> job id
        self.retried: list[str] = []

    def jobs(self) -> list[dict[str, Any]]:
        return self.listed

    def submit_job(self, doc: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
        replayed = idempotency_key in self.keys
        job_id = self.keys.setdefault(idempotency_key, f"job-{len(self.keys)}")
        return {"id": job_id, "state": "QUEUED", "replayed": replayed}

    def retry(self, job_id: str) -> dict[str, Any]:
        self.retried.append(job_id)
        return {"id": job_id, "state": "QUEUED"}


def test_a_failed_campaign_job_is_retried_and_a_cancelled_one_submitted_anew() -> None:
    from research.reproduction.run import submit_all

    client = _Jobs([{"id": "f", "name": "c/rte/smart", "state": "FAILED"},
                    {"id": "x", "name": "c/rte/vanilla", "state": "CANCELLED"},
                    {"id": "r", "name": "c/rte/r3f", "state": "RUNNING"},
                    {"id": "old", "name": "c/rte/r3f", "state": "CANCELLED"}])  # fmt: skip
    client.keys = {"c/rte/r3f#1": "r"}
    names = ["c/rte/smart", "c/rte/vanilla", "c/rte/r3f", "c/rte/mrpc"]
    ids = submit_all(client, [{"name": n} for n in names])  # type: ignore[arg-type]
    assert client.retried == ["f"] and ids[0] == "f"  # resumes from its checkpoints
    assert "c/rte/vanilla#1" in client.keys  # a cancelled job's trials run again, under a new key
    assert ids[2] == "r"  # the newest of its name (the second, under `#1`) is found again
    assert "c/rte/mrpc" in client.keys  # a new job: its bare name
