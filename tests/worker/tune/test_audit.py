"""Reproducibility audits against a real sweep (real Ray, real MLflow store): a recorded CPU trial re-runs
to the same metrics exactly (PASS); a changed byte in its data file makes it NOT-COMPARABLE, naming the
data digest; a forged seed in its recorded config makes it FAIL, naming a metric that differs."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from mlflow import MlflowClient

from worker.contract.spec import JobSpec
from worker.tune.audit import (
    AUDIT_TAG_PREFIX,
    AuditError,
    audit_trial,
    best_trial_run,
    compare,
    main,
    recorded_trial,
)
from worker.tune.settings import Settings
from worker.tune.sweep import run_sweep

pytestmark = pytest.mark.glue


@pytest.fixture(autouse=True)
def _keep_threads() -> Iterator[None]:
    threads = torch.get_num_threads()  # an audit applies the trial's recorded thread count
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def audited(
    ray_cluster: Any, sweep_settings: Settings, glue_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """One finished tiny SMART trial (2 epochs, dropout and noise on) whose data is a private copy."""
    data = tmp_path_factory.mktemp("audit") / "glue"
    (data / "RTE").mkdir(parents=True)
    for name in ("train.tsv", "dev.tsv"):
        shutil.copy(glue_dir / "RTE" / name, data / "RTE" / name)
    from tests.worker.conftest import _tiny_spec

    # 24 examples, not the 32 of the other sweeps of this session's experiment: MLflow keeps one dataset per
    # name and digest in an experiment, and test_mlflow_usage checks the source of the 32-example one.
    document = _tiny_spec(data, seeds=[3], training={"max_train_samples": 24})
    summary = run_sweep(JobSpec.model_validate(document), job_id="audit-1", settings=sweep_settings)
    assert summary["trials_by_state"]["TERMINATED"] == 1
    return {"data": data, "client": MlflowClient(sweep_settings.tracking_uri), "summary": summary}


def test_a_recorded_cpu_trial_reruns_to_the_same_metrics_exactly(audited: dict[str, Any]) -> None:
    client = audited["client"]
    run_id = best_trial_run(client, "audit-1")
    assert run_id == audited["summary"]["best"]["run_id"]
    trial = recorded_trial(client, run_id)
    assert trial.epochs == 2 and "eval_accuracy" in trial.history[1] and "train_r_s" in trial.history[2]
    report = audit_trial(trial)
    assert report["verdict"] == "PASS", report["reason"]
    assert report["exact"] and report["tolerance"] == 0
    assert len(report["metrics"]) == sum(len(m) for m in trial.history.values()) > 10
    assert all(row["recorded"] == row["rerun"] for row in report["metrics"])
    fields = {row["field"]: row for row in report["provenance"]}
    assert (
        fields["torch_version"]["same"] and fields["initial_model_sha256"]["same"] and fields["seed"]["same"]
    )


def test_a_changed_byte_of_data_is_not_comparable(audited: dict[str, Any], tmp_path: Path) -> None:
    client, data = audited["client"], audited["data"]
    trial = recorded_trial(client, best_trial_run(client, "audit-1"))
    train = data / "RTE" / "train.tsv"
    original = train.read_bytes()
    try:
        changed = bytearray(original)
        changed[-2] = ord("x") if changed[-2] != ord("x") else ord("y")
        train.write_bytes(bytes(changed))
        report = audit_trial(trial)
    finally:
        train.write_bytes(original)
    assert report["verdict"] == "NOT-COMPARABLE"
    assert report["reason"].startswith("data: the files' sha256 is now") and report["metrics"] == []


def test_a_forged_seed_fails_naming_the_differing_metric(audited: dict[str, Any]) -> None:
    client = audited["client"]
    trial = recorded_trial(client, best_trial_run(client, "audit-1"))
    forged = json.loads(trial.provenance["config"]) | {"seed": 4}
    trial.config = type(trial.config).from_dict(forged)
    report = audit_trial(trial)
    assert report["verdict"] == "FAIL"
    differing = [row for row in report["metrics"] if not row["match"]]
    assert differing and report["reason"].startswith(f"{differing[0]['metric']} at epoch")
    fields = {row["field"]: row for row in report["provenance"]}
    assert not fields["seed"]["same"] and not fields["initial_model_sha256"]["same"]


def test_the_entrypoint_logs_the_report_on_the_parent_run(
    audited: dict[str, Any],
    sweep_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", sweep_settings.tracking_uri)
    assert main(["--job-id", "audit-1", "--audit-id", "a1"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["verdict"] == "PASS" and len(printed["trials"]) == 1
    client = audited["client"]
    parent = client.get_run(audited["summary"]["parent_run_id"])
    assert parent.data.tags[f"{AUDIT_TAG_PREFIX}a1"] == "PASS"
    logged = json.loads(Path(client.download_artifacts(parent.info.run_id, "audits/a1.json")).read_text())
    assert logged["trials"][0]["verdict"] == "PASS"
    assert main(["--job-id", "no-such-job"]) == 2


def test_a_run_without_a_recorded_config_cannot_be_audited(audited: dict[str, Any]) -> None:
    with pytest.raises(AuditError, match="records no config"):
        recorded_trial(audited["client"], audited["summary"]["parent_run_id"])


def test_compare_is_exact_or_within_the_tolerance() -> None:
    recorded = {1: {"score": 0.5, "train_loss": float("nan")}}
    assert all(r["match"] for r in compare(recorded, {1: {"score": 0.5, "train_loss": float("nan")}}, 0.0))
    assert not compare({1: {"score": 0.5}}, {1: {"score": 0.5 + 1e-12}}, 0.0)[0]["match"]
    assert compare({1: {"score": 0.5}}, {1: {"score": 0.5004}}, 1e-3)[0]["match"]
    assert not compare({1: {"score": 0.5}}, {}, 1e-3)[0]["match"]  # an epoch the re-run did not reach
