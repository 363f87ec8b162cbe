"""Downloads from the job page (service/dashboard/downloads.py): a trial's best checkpoint and the job's
registered model as tars of exactly their files; nothing named by a path (a trial that is not the job's,
a model not named as the job's team's, a link in the folder), 404 for another team, 503 when MLflow
cannot answer."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from service.dashboard.downloads import tar_stream
from service.engine.rounds import Engine
from service.store.models import Job
from tests.service.dashboard_utils import logged_in, sweep
from tests.service.fakes import FakeRay, FakeTracker, summary_for

CHECKPOINT = {"config.json": b'{"model_type": "bert"}', "model.safetensors": os.urandom(3000)}


def _members(body: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_tar_stream_holds_the_folders_regular_files_only(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.bin").write_bytes(b"a" * 513)  # one byte past a block: padding
    (folder / "sub" / "b.txt").write_text("b")
    (folder / "passwd").symlink_to("/etc/passwd")  # a link out of the folder is left out
    (folder / "up").symlink_to(tmp_path)
    members = _members(b"".join(tar_stream(folder, "top")))
    assert members == {"top/a.bin": b"a" * 513, "top/sub/b.txt": b"b"}


def test_the_best_checkpoint_downloads_as_a_tar_and_only_the_jobs_trials(
    client: TestClient,
    engine: Engine,
    fake_ray: FakeRay,
    fake_tracker: FakeTracker,
    team_key: str,
    other_key: str,
) -> None:
    job_id = sweep(client, engine, fake_ray, fake_tracker, team_key)
    _set_summary(
        client, job_id, summary_for(job_id) | {"best": {"params": {}, "value": 0.6, "trial_id": "t003"}}
    )
    fake_tracker.checkpoints[(job_id, "t003")] = CHECKPOINT
    logged_in(client, team_key)
    page = client.get(f"/ui/jobs/{job_id}").text
    assert f'href="/ui/jobs/{job_id}/download/checkpoint?trial=t003"' in page  # the summary's best trial

    for url in (
        f"/ui/jobs/{job_id}/download/checkpoint",
        f"/ui/jobs/{job_id}/download/checkpoint?trial=t003",
    ):
        got = client.get(url)
        assert got.status_code == 200 and got.headers["content-type"] == "application/x-tar"
        top = f"{job_id}-t003-best_checkpoint"
        assert got.headers["content-disposition"] == f'attachment; filename="{top}.tar"'
        assert _members(got.content) == {f"{top}/{name}": data for name, data in CHECKPOINT.items()}

    assert client.get(f"/ui/jobs/{job_id}/download/checkpoint?trial=t001").status_code == 404  # none logged
    for bad in ("t999", "../t003", "/etc/passwd", "t003/../../x"):
        refused = client.get(f"/ui/jobs/{job_id}/download/checkpoint", params={"trial": bad})
        assert refused.status_code == 404 and "text/html" in refused.headers["content-type"], bad
    fake_tracker.down = True
    assert client.get(f"/ui/jobs/{job_id}/download/checkpoint").status_code == 503
    fake_tracker.down = False

    logged_in(client, other_key)
    assert client.get(f"/ui/jobs/{job_id}/download/checkpoint?trial=t003").status_code == 404
    client.cookies.clear()
    assert client.get(f"/ui/jobs/{job_id}/download/checkpoint", follow_redirects=False).status_code == 303


def test_the_registered_model_downloads_only_under_the_teams_own_name(
    client: TestClient, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker, team_key: str
) -> None:
    job_id = sweep(client, engine, fake_ray, fake_tracker, team_key)
    entry = {"name": "smartune-nlp-rte", "version": "3", "uri": "models:/smartune-nlp-rte/3", "alias": "best"}
    _set_summary(client, job_id, summary_for(job_id) | {"registered_model": entry})
    fake_tracker.model_files[("smartune-nlp-rte", "3")] = {
        "MLmodel": b"flavors: {}",
        "model/config.json": b"{}",
    }
    logged_in(client, team_key)
    page = client.get(f"/ui/jobs/{job_id}").text
    assert (
        f'href="/ui/jobs/{job_id}/download/model?task=rte"' in page and "models:/smartune-nlp-rte/3" in page
    )
    got = client.get(f"/ui/jobs/{job_id}/download/model")
    assert got.status_code == 200
    assert _members(got.content) == {
        "smartune-nlp-rte-v3/MLmodel": b"flavors: {}",
        "smartune-nlp-rte-v3/model/config.json": b"{}",
    }
    assert client.get(f"/ui/jobs/{job_id}/download/model?task=sst2").status_code == 404

    # a summary naming another team's model (or none with a version) offers nothing to download
    _set_summary(
        client, job_id, summary_for(job_id) | {"registered_model": entry | {"name": "smartune-vision-rte"}}
    )
    assert client.get(f"/ui/jobs/{job_id}/download/model").status_code == 404
    assert "download/model" not in client.get(f"/ui/jobs/{job_id}").text


def test_a_grid_over_tasks_asks_which_model(
    client: TestClient, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker, team_key: str
) -> None:
    job_id = sweep(client, engine, fake_ray, fake_tracker, team_key)
    models = {t: {"name": f"smartune-nlp-{t}", "version": "1"} for t in ("rte", "mrpc")}
    _set_summary(client, job_id, summary_for(job_id) | {"registered_models": models})
    fake_tracker.model_files[("smartune-nlp-mrpc", "1")] = {"MLmodel": b"x"}
    logged_in(client, team_key)
    which = client.get(f"/ui/jobs/{job_id}/download/model")
    assert which.status_code == 422 and "mrpc, rte" in which.text
    assert _members(client.get(f"/ui/jobs/{job_id}/download/model?task=mrpc").content) == {
        "smartune-nlp-mrpc-v1/MLmodel": b"x"
    }
    assert client.get(f"/ui/jobs/{job_id}/download/model?task=rte").status_code == 503  # MLflow lacks it


def _set_summary(client: TestClient, job_id: str, summary: dict[str, Any]) -> None:
    """The job's summary as the engine stores it once it read the sweep's `summary.json`."""
    db = client.app.state.db  # type: ignore[attr-defined]
    with db.write_sessions() as session, session.begin():
        job = session.get(Job, job_id)
        assert job is not None
        job.summary = summary
