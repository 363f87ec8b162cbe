"""`MlflowTracker.curves` against a real MLflow store with real runs laid out as the sweep driver lays
them out (docs/architecture.md §3): a parent run, one child run per trial, per-epoch metrics with
step = epoch, a trial of an earlier attempt superseded by its rerun. Checks the histories, the
downsampling, and that finished runs are read once while a running one is read again once it moved on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from service.engine.tracking import MlflowTracker
from worker.contract.tags import ATTEMPT, BEST_CHECKPOINT, CELL, JOB, PARENT, STATE, TRIAL

mlflow = pytest.importorskip("mlflow")


def _child(
    client: Any, experiment_id: str, parent: str, job: str, trial: str, attempt: int, state: str
) -> str:
    run = client.create_run(
        experiment_id,
        tags={PARENT: parent, JOB: job, TRIAL: trial, ATTEMPT: str(attempt), STATE: state},
    )
    return str(run.info.run_id)


def _epochs(client: Any, run_id: str, epochs: range, offset: float = 0.0) -> None:
    for e in epochs:
        client.log_metric(run_id, "score", 0.5 + 0.01 * e + offset, step=e)
        client.log_metric(run_id, "train_loss", 1.0 / e, step=e)
        client.log_metric(run_id, "epoch", float(e), step=e)


@pytest.mark.parametrize("store", ["file", "sqlite"])
def test_curves_from_a_real_store(tmp_path: Path, store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # MLflow 3 keeps the file store in maintenance mode behind this switch; SQLite is the embedded default.
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri() if store == "file" else f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MlflowTracker(uri, "smartune-nlp", str(tmp_path / "artifacts"))
    client = tracker.client
    experiment_id = tracker.ensure_experiment()
    assert experiment_id is not None
    parent = client.create_run(experiment_id, tags={JOB: "job-1", ATTEMPT: "1"}).info.run_id
    done = _child(client, experiment_id, parent, "job-1", "t1", 1, "TERMINATED")
    _epochs(client, done, range(1, 4))
    client.set_terminated(done)
    old = _child(client, experiment_id, parent, "job-1", "t2", 1, "ERROR")
    _epochs(client, old, range(1, 2), offset=-0.4)
    client.set_terminated(old, status="FAILED")
    running = _child(client, experiment_id, parent, "job-1", "t2", 2, "RUNNING")
    _epochs(client, running, range(1, 3))
    other = client.create_run(experiment_id, tags={JOB: "job-2", ATTEMPT: "1"}).info.run_id
    _epochs(client, _child(client, experiment_id, other, "job-2", "t1", 1, "RUNNING"), range(1, 2))

    curves = tracker.curves("job-1", ["score", "train_loss", "train_r_s"], max_points=100)
    assert set(curves) == {"t1", "t2"}  # job-2's run is not job-1's
    assert [p[0] for p in curves["t1"]["score"]] == [1, 2, 3]
    assert curves["t1"]["train_loss"][1] == (2, 0.5)
    assert [p[0] for p in curves["t2"]["score"]] == [1, 2]  # the rerun (attempt 2), not the failed one
    assert curves["t2"]["score"][0][1] == pytest.approx(0.51)
    assert "train_r_s" not in curves["t1"]  # never logged: absent, not empty

    reads: list[tuple[str, str]] = []
    real = client.get_metric_history

    def counting(run_id: str, key: str) -> Any:
        reads.append((run_id, key))
        return real(run_id, key)

    client.get_metric_history = counting
    tracker.curves("job-1", ["score"], max_points=100)
    assert reads == []  # nothing moved on: every history from the cache
    _epochs(client, running, range(3, 4))
    curves = tracker.curves("job-1", ["score"], max_points=2)
    assert reads == [(running, "score")]  # only the run that logged another epoch is read again
    assert curves["t2"]["score"] == [(1, pytest.approx(0.51)), (3, pytest.approx(0.53))]


def _sqlite_job(tmp_path: Path) -> tuple[MlflowTracker, Any, str, str]:
    """A tracker on a SQLite store with job-1's parent run: (tracker, its client, experiment id, parent run id)."""
    tracker = MlflowTracker(
        f"sqlite:///{tmp_path / 'mlflow.db'}", "smartune-nlp", str(tmp_path / "artifacts")
    )
    client = tracker.client
    experiment_id = tracker.ensure_experiment()
    assert experiment_id is not None
    parent = client.create_run(experiment_id, tags={JOB: "job-1", ATTEMPT: "1"}).info.run_id
    return tracker, client, experiment_id, parent


def test_a_best_checkpoint_and_a_registered_version_download_from_a_real_store(tmp_path: Path) -> None:
    """`MlflowTracker.download_checkpoint` / `download_model` (the job page's downloads) against SQLite."""
    tracker, client, experiment_id, parent = _sqlite_job(tmp_path)
    run_id = _child(client, experiment_id, parent, "job-1", "t1", 1, "TERMINATED")
    _child(client, experiment_id, parent, "job-1", "t2", 1, "TERMINATED")  # a trial that logged no checkpoint
    folder = tmp_path / "best"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bert"}')
    (folder / "model.safetensors").write_bytes(b"\x00" * 1000)
    client.log_artifacts(run_id, str(folder), BEST_CHECKPOINT)

    got = tracker.download_checkpoint("job-1", "t1", tmp_path / "dl")
    assert got is not None and sorted(p.name for p in got.iterdir()) == ["config.json", "model.safetensors"]
    assert (got / "model.safetensors").read_bytes() == b"\x00" * 1000
    assert tracker.download_checkpoint("job-1", "t2", tmp_path / "dl2") is None  # logged none
    assert tracker.download_checkpoint("job-1", "t9", tmp_path / "dl3") is None  # no such trial

    client.create_registered_model("smartune-nlp-rte")
    version = client.create_model_version(
        "smartune-nlp-rte", f"runs:/{run_id}/{BEST_CHECKPOINT}", run_id=run_id
    ).version
    model = tracker.download_model("smartune-nlp-rte", str(version), tmp_path / "model")
    assert sorted(p.name for p in model.rglob("*")) == ["config.json", "model.safetensors"]
    with pytest.raises(Exception, match="not found|RESOURCE_DOES_NOT_EXIST"):
        tracker.download_model("smartune-nlp-rte", "9", tmp_path / "none")


def test_a_trials_params_are_its_cell_and_its_seed(tmp_path: Path) -> None:
    """The cell tag leaves the seed out; the run's params (the resolved config, as text) hold it: the
    trial's params carry both, so two seeds of one cell are told apart on the compare page and in the
    parallel coordinates."""
    tracker, client, experiment_id, parent = _sqlite_job(tmp_path)
    for trial, seed in (("t1", 1), ("t2", 2)):
        run_id = _child(client, experiment_id, parent, "job-1", trial, 1, "TERMINATED")
        client.set_tag(run_id, CELL, '{"learning_rate": 2e-05}')
        client.log_param(run_id, "seed", str(seed))
        client.log_param(run_id, "learning_rate", "2e-05")
    no_seed = _child(client, experiment_id, parent, "job-1", "t3", 1, "RUNNING")
    client.set_tag(no_seed, CELL, '{"learning_rate": 3e-05}')  # params not logged yet
    params = {t.trial_id: t.params for t in tracker.job_runs("job-1").trials}
    assert params == {
        "t1": {"learning_rate": 2e-05, "seed": 1},
        "t2": {"learning_rate": 2e-05, "seed": 2},
        "t3": {"learning_rate": 3e-05},
    }
