"""The sweep's pure pieces, without a Ray cluster: summary statistics, error classes, settings, the
Tune search space and trial states, the live table's pickling."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from ray import tune

from worker.contract.errors import RepeatedFailure, classify
from worker.contract.outcome import no_result_reason
from worker.contract.sources import default_data_source
from worker.contract.spec import PLAN_DIGEST_ENV, JobSpec
from worker.contract.specfile import SpecError
from worker.training.data import DataError
from worker.training.loop import NumericsError
from worker.tune.progress import LiveTable
from worker.tune.settings import Settings
from worker.tune.summary import TrialOutcome, build_summary, summary_metrics
from worker.tune.sweep import check_plan
from worker.tune.tuning import (
    TrialResolver,
    cell_axes,
    param_space,
    resolve_trial,
    trial_configs,
    trial_state,
)


def _outcome(trial_id: str, state: str, value: float | None, seed: int = 1, **cell: object) -> TrialOutcome:
    return TrialOutcome(trial_id=trial_id, state=state, cell=cell, seed=seed, value=value,  # type: ignore[arg-type]
                        run_id=f"run-{trial_id}", checkpoint_uri=f"file:///a/{trial_id}/best_checkpoint")  # fmt: skip


def test_summary_means_over_seeds_and_best_trial() -> None:
    outcomes = [
        _outcome("t0", "TERMINATED", 0.60, seed=1, lr=1e-5),
        _outcome("t1", "TERMINATED", 0.70, seed=2, lr=1e-5),
        _outcome("t2", "TERMINATED", 0.80, seed=1, lr=2e-5),
        _outcome("t3", "ERROR", 0.99, seed=2, lr=2e-5),  # failed: listed, not averaged, never best
        _outcome("t4", "STOPPED", 0.50, seed=1, lr=3e-5),
        _outcome("t5", "PENDING", None, seed=2, lr=3e-5),
    ]
    summary = build_summary(job_id="j", tracking_uri="sqlite:///x.db", parent_run_id="p",
                            main_metric="accuracy", outcomes=outcomes)  # fmt: skip
    assert summary["trials_by_state"] == {
        "PENDING": 1,
        "RUNNING": 0,
        "TERMINATED": 3,
        "ERROR": 1,
        "STOPPED": 1,
    }
    cells = {c["params"]["lr"]: c for c in summary["cells"]}
    assert cells[1e-5]["n"] == 2 and cells[1e-5]["mean"] == pytest.approx(0.65)
    assert cells[1e-5]["std"] == pytest.approx(0.0707107, rel=1e-5) and cells[1e-5]["trial_ids"] == [
        "t0",
        "t1",
    ]
    assert cells[2e-5]["n"] == 1 and cells[2e-5]["std"] is None and cells[2e-5]["trial_ids"] == ["t2", "t3"]
    assert cells[3e-5]["n"] == 1 and cells[3e-5]["mean"] == 0.5
    assert summary["best"] == {"params": {"lr": 2e-5, "seed": 1}, "value": 0.8, "run_id": "run-t2",
                               "checkpoint_uri": "file:///a/t2/best_checkpoint", "trial_id": "t2"}  # fmt: skip
    metrics = summary_metrics(summary)
    assert metrics["best_score"] == 0.8 and metrics["trials_total"] == 6 and metrics["trials_error"] == 1


def test_summary_without_results_has_no_best() -> None:
    summary = build_summary(job_id="j", tracking_uri="u", parent_run_id="p", main_metric="accuracy",
                            outcomes=[_outcome("t0", "ERROR", float("nan"))])  # fmt: skip
    assert summary["best"] is None and summary["cells"][0]["mean"] is None and summary["cells"][0]["n"] == 0


def test_summary_lists_each_failure_and_says_why_nothing_completed() -> None:
    def failed(trial_id: str, error_class: str, error: str) -> TrialOutcome:
        return TrialOutcome(trial_id=trial_id, state="ERROR", cell={}, seed=1, value=None,
                            run_id=f"run-{trial_id}", error_class=error_class, error=error)  # fmt: skip

    data = "DataError: /d/RTE/train.tsv, row 6: not UTF-8 text (invalid start byte)"
    outcomes = [failed("t0", "data", data), failed("t1", "data", data), failed("t2", "oom", "MemoryError: x")]
    summary = build_summary(job_id="j", tracking_uri="u", parent_run_id="p", main_metric="accuracy",
                            outcomes=outcomes)  # fmt: skip
    assert summary["errors"][0] == {
        "trial_id": "t0",
        "run_id": "run-t0",
        "error_class": "data",
        "error": data,
    }
    assert no_result_reason(summary) == (
        f"no trial completed (3 ERROR); failed trials: 2 x data: {data} (and 1 other reasons)"
    )
    ok = build_summary(job_id="j", tracking_uri="u", parent_run_id="p", main_metric="accuracy",
                       outcomes=[_outcome("t0", "TERMINATED", 0.5)])  # fmt: skip
    assert ok["errors"] == []


def test_error_classes() -> None:
    assert classify(NumericsError("loss nan")) == "numerics"
    assert classify(torch.OutOfMemoryError("CUDA out of memory")) == "oom"
    assert classify(RuntimeError("CUDA out of memory. Tried to allocate 2 GiB")) == "oom"
    assert classify(DataError("bad label", file="x.tsv", row=3)) == "data"
    from ray.exceptions import ActorDiedError

    assert classify(ActorDiedError()) == "infra"
    assert classify(ValueError("something else")) == "other"
    assert classify(None, "Traceback ... worker.training.loop.NumericsError: non-finite") == "numerics"
    wrapped = RuntimeError("trial failed")
    wrapped.__cause__ = NumericsError("nan")
    assert classify(wrapped) == "numerics"
    repeated = pickle.loads(pickle.dumps(RepeatedFailure("data", "DataError: no file")))
    assert classify(repeated) == "data" and "no file" in str(repeated)


def test_settings_from_environment(tmp_path: Path) -> None:
    s = Settings.from_env({"SMARTUNE_DATA_DIR": str(tmp_path)})
    assert s.storage_path == str(tmp_path / "ray_results")
    assert s.tracking_uri == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert s.artifact_root == (tmp_path / "mlartifacts").as_uri() and s.experiment == "smartune"
    assert s.experiment_path("job-1") == str(tmp_path / "ray_results" / "job-1")
    remote = Settings.from_env({"SMARTUNE_DATA_DIR": str(tmp_path), "SMARTUNE_STORAGE_PATH": "s3://bucket/runs",
                                "MLFLOW_TRACKING_URI": "http://mlflow:5000",
                                "SMARTUNE_MLFLOW_EXPERIMENT": "team-a"})  # fmt: skip
    assert remote.experiment_path("job-1") == "s3://bucket/runs/job-1"
    assert remote.artifact_root is None and remote.experiment == "team-a"  # the server decides
    assert default_data_source({"SMARTUNE_GLUE_DIR": str(tmp_path)}) == str(tmp_path)


def test_search_space_and_sampled_values_reach_the_trial_config() -> None:
    spec = JobSpec.model_validate({
        "task": "rte", "model": "tiny-random", "data": "/abs/glue", "method": "smart",
        "search": {"algorithm": "random", "num_samples": 3},
        "search_space": {"axes": {"lambda_s": {"type": "uniform", "low": 1, "high": 5},
                                  "method": {"values": ["smart", "vanilla"]}}},
        "resources": {"cpus": 2},
    })  # fmt: skip
    trials = trial_configs(spec, spec.resources.cpus)
    assert len(trials) == 2 and all(t["num_threads"] == 2 and t["data"] == "/abs/glue" for t in trials)
    space = param_space(spec, trials)
    assert isinstance(space["sampled"]["lambda_s"], tune.search.sample.Float)
    axes = cell_axes(spec)
    assert axes == ("method", "lambda_s")
    smart = {"train": trials[0], "sampled": {"lambda_s": 2.5}}
    resolved = resolve_trial(smart, axes)
    assert (
        resolved.config.method_params["lambda_s"] == 2.5 and resolved.config.method_config().lambda_s == 2.5
    )
    assert resolved.cell == {"method": "smart", "lambda_s": 2.5} and resolved.seed == 1
    vanilla = {"train": trials[1], "sampled": {"lambda_s": 2.5}}
    assert resolve_trial(vanilla, axes).cell == {"method": "vanilla", "lambda_s": None}  # vanilla ignores it
    # The driver resolves each trial once, whatever how many callbacks ask.
    resolver = TrialResolver(axes)
    assert resolver("t1", smart) is resolver("t1", smart) and resolver("t1", smart).planned_epochs == 3


def test_the_driver_runs_the_plan_the_control_plane_priced() -> None:
    spec = JobSpec.model_validate({"task": "rte", "model": "tiny-random", "data": "/abs/glue",
                                   "search_space": {"axes": {"lambda_s": {"values": [1.0, 3.0]}}}})  # fmt: skip
    check_plan(spec, {})  # a local run, or a job queued before the service passed the digest
    check_plan(spec, {PLAN_DIGEST_ENV: spec.plan_digest()})
    with pytest.raises(SpecError, match=f"^{PLAN_DIGEST_ENV}: .*other trials"):
        check_plan(spec, {PLAN_DIGEST_ENV: "0" * 64})


def test_trial_states() -> None:
    assert trial_state("TERMINATED", 3, 3) == "TERMINATED"
    assert trial_state("TERMINATED", 1, 3) == "STOPPED"  # ASHA or the time budget
    assert trial_state("ERROR", 1, 3) == "ERROR"
    assert trial_state("PENDING", 0, 3) == "PENDING" and trial_state("RUNNING", 1, 3) == "RUNNING"


def test_live_table_survives_tune_pickling() -> None:
    import io

    table = LiveTable(TrialResolver(("method",)), stream=io.StringIO(), interval_s=0.5)
    clone = pickle.loads(pickle.dumps(table))
    assert clone.resolver.axes == ("method",) and clone.stream is None and clone.interval_s == 0.5
