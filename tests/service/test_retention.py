"""Checkpoint retention of finished jobs (service.storage.retention), on a fake Tune storage tree in tmp_path
(and in moto's S3): which checkpoints a pass keeps and deletes, when they expire, what the job's timeline
says, and which jobs it leaves alone."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from fastapi.testclient import TestClient
from moto import mock_aws

from service.config import Settings
from service.storage import retention
from service.storage.retention import EXPIRED, PRUNED, due
from service.storage.trees import open_tree
from service.store import crud
from service.store.db import Database, utcnow
from service.store.models import Job, JobState, Trial
from tests.service.utils import auth, make_team, spec
from worker.contract.spec import JobSpec

DAY = timedelta(days=1)


def _job(db: Database, state: JobState, trials: dict[str, tuple[str, float | None]], best: str | None = None,
         **columns: Any) -> str:  # fmt: skip
    """A job of team nlp ended in `state`, with trial rows {id: (state, best score)} and its summary's best."""
    with db.write_sessions() as session, session.begin():
        team = crud.get_team(session=session, name="nlp")
        assert team is not None
        job = crud.create_job(session=session, team=team, spec=JobSpec.model_validate(spec()),
                              n_trials=len(trials), idempotency_key=None)  # fmt: skip
        session.flush()
        for trial_id, (trial_state, score) in trials.items():
            session.add(
                Trial(job_id=job.id, trial_id=trial_id, attempt=1, state=trial_state, best_score=score)
            )
        job.summary = {"best": {"trial_id": best}} if best else None
        for name, value in columns.items():
            setattr(job, name, value)
        crud.set_state(session=session, job=job, state=state, reason="ended")
        return job.id


def _tree(root: Path, job_id: str, layout: dict[str, list[str]]) -> None:
    """Trial folder -> checkpoint names; a name ending in `?` is torn (no manifest). Each trial also keeps
    Tune's own files (result.json), which retention never touches."""
    for trial, names in layout.items():
        folder = root / job_id / f"trial_{trial}"
        folder.mkdir(parents=True)
        (folder / "result.json").write_text("{}")
        for name in names:
            checkpoint = folder / f"checkpoint_{name.rstrip('?')}"
            checkpoint.mkdir()
            (checkpoint / "trial_state.pt").write_bytes(b"w" * 1000)
            if not name.endswith("?"):
                (checkpoint / "trial_state.json").write_text("{}")


def _left(root: Path, job_id: str) -> list[str]:
    return sorted(str(p.relative_to(root / job_id)) for p in (root / job_id).glob("trial_*/checkpoint_*"))


def _job_row(db: Database, job_id: str) -> Job:
    with db.sessions() as session:
        job = crud.get_job(session=session, job_id=job_id, team_id=None)
        assert job is not None
        return job


def _timeline(db: Database, job_id: str) -> list[str]:
    with db.sessions() as session:
        return [t.reason for t in crud.job_transitions(session=session, job_id=job_id)]


@pytest.fixture
def tune(settings: Settings, db: Database) -> Path:
    """Team nlp's Tune storage (a folder under the data dir)."""
    make_team(db, "nlp")
    return Path(settings.team_storage("nlp"))


def test_a_succeeded_job_keeps_its_best_trials_last_checkpoint_then_expires(
    client: TestClient, db: Database, settings: Settings, tune: Path
) -> None:
    job_id = _job(db, JobState.SUCCEEDED, {"a": ("TERMINATED", 0.6), "b": ("TERMINATED", 0.8)}, best="b")
    _tree(tune, job_id, {"a": ["000000", "000001"], "b": ["000000", "000001"], "c": ["000000"]})
    now = utcnow()
    assert retention.run(db, settings, now) == 4
    assert _left(tune, job_id) == ["trial_b/checkpoint_000001"]
    assert (tune / job_id / "trial_a" / "result.json").exists()  # Tune's records stay
    job = _job_row(db, job_id)
    assert (job.retention_step, job.retention_at) == (PRUNED, now)
    last = _timeline(db, job_id)[-1]
    assert last.startswith("checkpoint retention: deleted 4 checkpoint(s) of 3 trial(s) (4.01 kB): ")
    assert "trial_a/checkpoint_000000" in last and "trial_c/checkpoint_000000" in last
    assert last.endswith("kept for 14 days: trial_b/checkpoint_000001 (the best trial's last)")
    assert retention.run(db, settings, now + 13 * DAY) == 0  # kept for the retention days
    assert len(_timeline(db, job_id)) == 3  # submitted, ended, pruned: a pass that deletes nothing is silent
    assert retention.run(db, settings, now + 14 * DAY) == 1
    assert _left(tune, job_id) == [] and _job_row(db, job_id).retention_step == EXPIRED
    assert _timeline(db, job_id)[-1] == (
        "checkpoint retention: 14 days after the job ended, deleted its 1 remaining checkpoint(s) of 1 "
        "trial(s) (1 kB): trial_b/checkpoint_000001; its best model stays in MLflow"
    )
    assert retention.run(db, settings, now + 100 * DAY) == 0
    key = make_team(db, "other")
    assert client.get(f"/api/v1/jobs/{job_id}", headers=auth(key)).status_code == 404
    with db.write_sessions() as session, session.begin():  # the team's own key reads its timeline
        row = crud.get_team(session=session, name="nlp")
        assert row is not None
        _, nlp = crud.create_api_key(session=session, team=row)
    reasons = [
        t["reason"] for t in client.get(f"/api/v1/jobs/{job_id}", headers=auth(nlp)).json()["transitions"]
    ]
    assert reasons[-2].startswith("checkpoint retention: deleted 4") and "14 days after" in reasons[-1]


def test_a_failed_job_keeps_each_unfinished_trials_last_checkpoint_to_resume_from(
    db: Database, settings: Settings, tune: Path
) -> None:
    """a and b finished (b best, by the synced scores: no summary), c failed, d never synced a row."""
    trials = {"a": ("TERMINATED", 0.6), "b": ("TERMINATED", 0.8), "c": ("ERROR", 0.9)}
    job_id = _job(db, JobState.FAILED, trials)
    _tree(tune, job_id, {t: ["000000", "000001"] for t in "abcd"})
    assert retention.run(db, settings, utcnow()) == 5
    assert _left(tune, job_id) == [f"trial_{t}/checkpoint_000001" for t in "bcd"]
    last = _timeline(db, job_id)[-1]
    assert (
        "trial_c/checkpoint_000001 (to resume from)" in last
        and "trial_d/checkpoint_000001 (to resume from)" in last
    )
    assert "trial_b/checkpoint_000001 (the best trial's last)" in last


def test_the_newest_whole_checkpoint_is_kept_not_a_torn_one(
    db: Database, settings: Settings, tune: Path
) -> None:
    job_id = _job(db, JobState.SUCCEEDED, {"b": ("TERMINATED", 0.8)}, best="b")
    _tree(tune, job_id, {"b": ["000000", "000001", "000002?"]})
    retention.run(db, settings, utcnow())
    assert _left(tune, job_id) == ["trial_b/checkpoint_000001"]


def test_a_team_with_no_retention_days_loses_every_checkpoint_at_once(
    db: Database, settings: Settings, tune: Path
) -> None:
    with db.write_sessions() as session, session.begin():
        team = crud.get_team(session=session, name="nlp")
        assert team is not None
        team.checkpoint_retention_days = 0
    job_id = _job(db, JobState.SUCCEEDED, {"b": ("TERMINATED", 0.8)}, best="b")
    _tree(tune, job_id, {"b": ["000000", "000001"]})
    assert retention.run(db, settings, utcnow()) == 2
    assert _left(tune, job_id) == [] and _job_row(db, job_id).retention_step == EXPIRED
    assert "0 days after the job ended" in _timeline(db, job_id)[-1]


@pytest.mark.parametrize(
    ("state", "columns"),
    [
        (JobState.RUNNING, {}),
        (JobState.CANCELLED, {"cleanup_pending": True}),  # its Ray job may still write
        (JobState.SUCCEEDED, {"summary_pending": True}),  # the best trial is not known yet
    ],
)
def test_jobs_not_settled_are_left_alone(
    db: Database, settings: Settings, tune: Path, state: JobState, columns: dict[str, Any]
) -> None:
    job_id = _job(db, state, {"b": ("TERMINATED", 0.8)}, best="b", **columns)
    _tree(tune, job_id, {"b": ["000000", "000001"], "c": ["000000"]})
    assert retention.run(db, settings, utcnow() + 365 * DAY) == 0
    assert len(_left(tune, job_id)) == 3 and _job_row(db, job_id).retention_step is None


def test_which_step_a_job_is_due_for() -> None:
    ended = datetime(2026, 1, 10, tzinfo=utcnow().tzinfo)
    fresh = Job(finished_at=ended, retention_step=None, retention_at=None)
    assert due(fresh, 14, ended) == PRUNED and due(fresh, 14, ended + 14 * DAY) == EXPIRED
    pruned = Job(finished_at=ended, retention_step=PRUNED, retention_at=ended + DAY)
    assert due(pruned, 14, ended + 2 * DAY) is None and due(pruned, 14, ended + 14 * DAY) == EXPIRED
    expired = Job(finished_at=ended, retention_step=EXPIRED, retention_at=ended + 14 * DAY)
    assert due(expired, 14, ended + 400 * DAY) is None
    retried = Job(finished_at=ended + 20 * DAY, retention_step=EXPIRED, retention_at=ended + 14 * DAY)
    assert due(retried, 14, ended + 21 * DAY) == PRUNED  # retried and ended again: pruned again
    assert due(Job(finished_at=None), 14, ended) is None


def test_the_layout_is_the_workers() -> None:
    """The folder and manifest names retention reads are the ones the sweep writes."""
    from worker.tune.checkpoints import MANIFEST_FILE
    from worker.tune.tuning import trial_dir_name

    assert retention.TRIAL_FOLDER.format("ab_00001") == trial_dir_name("ab_00001")
    assert retention.MANIFEST == MANIFEST_FILE


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        boto3.client("s3").create_bucket(Bucket="smartune")
        yield


def test_retention_and_measurement_on_s3_tune_storage(
    s3: None, db: Database, settings: Settings, tmp_path: Path
) -> None:
    settings.storage_path = "s3://smartune/ray_results"
    make_team(db, "nlp")
    job_id = _job(db, JobState.SUCCEEDED, {"a": ("TERMINATED", 0.6), "b": ("TERMINATED", 0.8)}, best="b")
    _tree(tmp_path / "local", job_id, {"a": ["000000"], "b": ["000000", "000001"]})
    client = boto3.client("s3")
    for path in sorted((tmp_path / "local").rglob("*")):
        if path.is_file():
            key = f"ray_results/nlp/{path.relative_to(tmp_path / 'local')}"
            client.put_object(Bucket="smartune", Key=key, Body=path.read_bytes())
    tree = open_tree(settings.team_storage("nlp"))
    assert tree is not None and sum(size for _, size in tree.files()) == 3 * 1002 + 2 * 2
    assert retention.run(db, settings, utcnow()) == 2
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket="smartune")["Contents"])
    prefix = f"ray_results/nlp/{job_id}/"
    assert keys == [prefix + k for k in ("trial_a/result.json", "trial_b/checkpoint_000001/trial_state.json",
                                         "trial_b/checkpoint_000001/trial_state.pt", "trial_b/result.json")]  # fmt: skip
