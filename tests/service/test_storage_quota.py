"""Storage per team (service.storage): the quota's arithmetic, uploads and submissions refused with 409 and
the numbers past it, other teams unaffected, the engine's measurement of checkpoints and MLflow artifacts,
and where an admin sets and reads it (the API, `smartune admin`, the pool)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from cli.main import main
from service.config import Settings
from service.engine.rounds import Engine
from service.storage.keeper import Keeper
from service.storage.usage import Usage, human, quota_of
from service.store.db import Database
from service.store.models import Job, Team, Trial
from tests.service.dataset_utils import expected_digest, push, rte_files
from tests.service.utils import auth, make_team, spec

TEAMS = "/api/v1/teams"


def _storage(client: TestClient, admin_key: str, team: str) -> dict[str, Any]:
    response = client.get(f"{TEAMS}/{team}", headers=auth(admin_key))
    assert response.status_code == 200, response.text
    return dict(response.json()["storage"])


def _set_quota(client: TestClient, admin_key: str, team: str, quota: int | None) -> None:
    response = client.patch(f"{TEAMS}/{team}", headers=auth(admin_key), json={"storage_quota_bytes": quota})
    assert response.status_code == 200, response.text
    assert response.json()["storage"]["quota_bytes"] == quota


def test_the_quota_arithmetic() -> None:
    assert [human(n) for n in (512, 1500, 200 * 10**6, 1_100_000_000)] == [
        "512 B",
        "1.5 kB",
        "200 MB",
        "1.1 GB",
    ]
    used = Usage(datasets=600, checkpoints=300, artifacts=100, quota=1000, measured_at=None)
    assert used.used == 1000 and used.fits(0) and not used.fits(1)
    assert Usage(datasets=10**15, checkpoints=0, artifacts=0, quota=None, measured_at=None).fits(10**15)
    settings = Settings(default_storage_quota_gb=1.5)
    assert quota_of(Team(name="a"), settings) == 1_500_000_000  # GB: 10^9 bytes
    assert quota_of(Team(name="b", storage_quota_bytes=7), settings) == 7  # the team's own wins
    assert quota_of(Team(name="c"), Settings()) is None  # unset: unlimited


def test_an_upload_past_the_quota_is_409_with_the_numbers_and_other_teams_are_unaffected(
    client: TestClient, db: Database, admin_key: str
) -> None:
    nlp, vision = make_team(db, "nlp"), make_team(db, "vision")
    first = push(client, nlp, rte_files(0), name="a").json()
    assert _storage(client, admin_key, "nlp")["datasets_bytes"] == first["size_bytes"]
    push(client, nlp, rte_files(0), name="same")  # the same content again: stored once, counted once
    assert _storage(client, admin_key, "nlp")["used_bytes"] == first["size_bytes"]
    _set_quota(client, admin_key, "nlp", first["size_bytes"] + 10)
    refused = push(client, nlp, rte_files(1), name="b", expect=409)
    body = refused.json()
    upload = int(refused.request.headers["content-length"])
    assert body["storage"] == {
        "used_bytes": first["size_bytes"], "quota_bytes": first["size_bytes"] + 10,
        "datasets_bytes": first["size_bytes"], "checkpoints_bytes": 0, "artifacts_bytes": 0,
        "measured_at": None, "upload_bytes": upload,
    }  # fmt: skip
    assert "would exceed its storage quota" in body["detail"] and human(upload) in body["detail"]
    names = [d["name"] for d in client.get("/api/v1/datasets", headers=auth(nlp)).json()["data"]]
    assert sorted(names) == ["a", "same"]  # nothing of the refused upload was recorded
    push(client, vision, rte_files(1), name="b")  # no quota of its own, no default: unaffected
    _set_quota(client, admin_key, "nlp", None)  # back to the deployment default: unlimited
    push(client, nlp, rte_files(1), name="b")


def test_a_body_without_a_declared_size_is_refused_once_its_files_are_counted(
    client: TestClient, db: Database, settings: Settings
) -> None:
    """Chunked: nothing to check before the body is read. Its files do not fit: 409 when it would be
    recorded, and the objects it left in the dataset store are removed again."""
    key = make_team(db, "nlp", storage_quota_bytes=100)
    files = rte_files(2)
    request = httpx.Request("POST", "http://x/", data={"name": "big", "task": "rte"},
                            files=[("files", (n, d)) for n, d in files.items()])  # fmt: skip
    body = request.read()
    response = client.post(
        "/api/v1/datasets",
        content=iter([body]),  # a stream of unknown length: Transfer-Encoding chunked
        headers={**auth(key), "content-type": request.headers["content-type"]},
    )
    assert "content-length" not in response.request.headers
    assert response.status_code == 409, response.text
    assert response.json()["storage"]["upload_bytes"] == sum(len(d) for d in files.values())
    assert not (Path(settings.dataset_store_uri) / "sha256" / expected_digest(files)).exists()


def test_a_submission_of_a_team_at_its_quota_is_409_with_the_numbers(
    client: TestClient, db: Database, admin_key: str
) -> None:
    nlp, vision = make_team(db, "nlp"), make_team(db, "vision")
    size = push(client, nlp, rte_files(0)).json()["size_bytes"]
    assert client.post("/api/v1/jobs", json=spec(), headers=auth(nlp)).status_code == 201  # under it
    _set_quota(client, admin_key, "nlp", size)  # used == quota: no room for a job's checkpoints
    refused = client.post("/api/v1/jobs", json=spec(), headers=auth(nlp))
    assert refused.status_code == 409, refused.text
    assert (
        refused.json()["storage"]["used_bytes"] == size and refused.json()["storage"]["quota_bytes"] == size
    )
    assert "has used its storage quota" in refused.json()["detail"]
    assert client.post("/api/v1/jobs", json=spec(), headers=auth(vision)).status_code == 201


def test_the_deployment_default_applies_to_teams_without_their_own(
    client: TestClient, db: Database, admin_key: str, settings: Settings
) -> None:
    key = make_team(db, "nlp")
    settings.default_storage_quota_gb = 1e-7  # 100 bytes
    refused = push(client, key, rte_files(0), expect=409)
    assert refused.json()["storage"]["quota_bytes"] == 100
    listed = client.get(TEAMS, headers=auth(admin_key)).json()["data"]
    assert [(t["name"], t["storage_quota_bytes"], t["storage"]["quota_bytes"]) for t in listed] == [
        ("nlp", None, 100)
    ]


def test_the_admin_sets_quota_and_retention_and_bad_values_name_the_field(
    client: TestClient, db: Database, admin_key: str
) -> None:
    make_team(db, "nlp")
    changed = client.patch(f"{TEAMS}/nlp", headers=auth(admin_key),
                           json={"storage_quota_bytes": 5 * 10**9, "checkpoint_retention_days": 3})  # fmt: skip
    assert changed.status_code == 200, changed.text
    assert (
        changed.json()["storage_quota_bytes"] == 5 * 10**9
        and changed.json()["checkpoint_retention_days"] == 3
    )
    for body, field in (({"storage_quota_bytes": -1}, "storage_quota_bytes"),
                        ({"storage_quota_bytes": "5GB"}, "storage_quota_bytes"),
                        ({"checkpoint_retention_days": -2}, "checkpoint_retention_days")):  # fmt: skip
        bad = client.patch(f"{TEAMS}/nlp", headers=auth(admin_key), json=body)
        assert bad.status_code == 422 and bad.json()["field"] == field, bad.text
    created = client.post(TEAMS, headers=auth(admin_key), json={"name": "cv", "storage_quota_bytes": 10})
    assert created.status_code == 201 and created.json()["storage"]["quota_bytes"] == 10


def test_the_pool_shows_each_teams_storage(client: TestClient, db: Database, admin_key: str) -> None:
    key = make_team(db, "nlp", storage_quota_bytes=2 * 10**9)
    size = push(client, key, rte_files(0)).json()["size_bytes"]
    mine = client.get("/api/v1/pool", headers=auth(key)).json()["teams"]
    assert [(t["team"], t["storage"]["used_bytes"], t["storage"]["quota_bytes"]) for t in mine] == [
        ("nlp", size, 2 * 10**9)
    ]
    from tests.service.dashboard_utils import logged_in

    page = logged_in(client, key).get("/ui/pool")
    assert page.status_code == 200 and "Storage used / quota" in page.text
    assert f"{human(size)} / 2 GB" in page.text


def _write(path: Path, size: int, text: str | None = None) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if text is not None else b"x" * size)
    return path.stat().st_size


def test_the_engine_measures_checkpoints_and_local_mlflow_artifacts_per_team(
    client: TestClient, db: Database, admin_key: str, settings: Settings, engine: Engine
) -> None:
    """Tune storage per team, walked whole; MLflow's local folder by run: a job's parent run, its trials'
    runs and the models logged from them (MLmodel names the run); a run nobody knows counts for nobody."""
    key = make_team(db, "nlp")
    make_team(db, "vision")
    job_id = client.post("/api/v1/jobs", json=spec(), headers=auth(key)).json()["id"]
    parent, run = "a" * 32, "b" * 32
    with db.write_sessions() as session, session.begin():
        session.get_one(Job, job_id).mlflow_parent_run_id = parent
        session.add(Trial(job_id=job_id, trial_id="t1", attempt=1, state="TERMINATED", mlflow_run_id=run))
    tune = settings.data_dir / "ray_results"
    checkpoints = _write(tune / "nlp" / job_id / "trial_t1" / "checkpoint_000000" / "trial_state.pt", 1000)
    checkpoints += _write(tune / "nlp" / job_id / "experiment_state.json", 50)
    _write(tune / "vision" / "job-x" / "trial_t" / "checkpoint_000000" / "trial_state.pt", 7)
    root = Path(str(settings.artifact_root))
    artifacts = _write(root / parent / "artifacts" / "summary.json", 100)
    artifacts += _write(root / run / "artifacts" / "best_checkpoint" / "model.safetensors", 2000)
    artifacts += _write(root / "models" / "m-1" / "artifacts" / "model" / "model.safetensors", 3000)
    artifacts += _write(
        root / "models" / "m-1" / "artifacts" / "MLmodel", 0, f"flavors: {{}}\nrun_id: {run}\n"
    )
    _write(root / ("c" * 32) / "artifacts" / "x", 500)  # a run of no job: nobody's
    _write(root / "models" / "m-2" / "artifacts" / "MLmodel", 0, f"run_id: {'d' * 32}\n")
    engine.storage.tick(force=True)
    nlp = _storage(client, admin_key, "nlp")
    assert (nlp["checkpoints_bytes"], nlp["artifacts_bytes"]) == (checkpoints, artifacts)
    assert nlp["measured_at"] is not None and nlp["used_bytes"] == checkpoints + artifacts
    assert _storage(client, admin_key, "vision")["checkpoints_bytes"] == 7
    _set_quota(client, admin_key, "nlp", checkpoints + artifacts)  # measured bytes count against the quota
    assert client.post("/api/v1/jobs", json=spec(), headers=auth(key)).status_code == 409


def test_the_keeper_runs_once_per_refresh_period(db: Database, settings: Settings) -> None:
    now = [0.0]
    keeper = Keeper(db=db, settings=settings, clock=lambda: now[0])
    assert keeper.tick() and not keeper.tick()  # the first round measures; the next ones wait
    now[0] = settings.storage_refresh_s - 1
    assert not keeper.tick()
    now[0] = settings.storage_refresh_s
    assert keeper.tick()


def test_smartune_admin_sets_the_storage_quota_and_retention(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    admin = ["admin", "--data-dir", str(tmp_path / "data")]
    assert main([*admin, "create-team", "nlp", "--storage-quota", "2GB", "--no-key"]) == 0
    assert main([*admin, "set-storage", "nlp", "--storage-quota", "1.5GiB", "--retention-days", "3"]) == 0
    assert main([*admin, "list-teams", "--json"]) == 0
    listed = capsys.readouterr().out
    team = [t for t in json.loads(listed) if t["name"] == "nlp"][0]
    assert (team["storage_quota_bytes"], team["checkpoint_retention_days"]) == (int(1.5 * 2**30), 3)
    assert main([*admin, "set-storage", "nlp", "--storage-quota", "default"]) == 0
    assert main([*admin, "list-teams"]) == 0
    assert "storage_bytes=default" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="2"):  # argparse refuses the value, naming the flag
        main([*admin, "set-storage", "nlp", "--storage-quota", "lots"])
    assert "--storage-quota: 'lots': a size" in capsys.readouterr().err
    assert main([*admin, "set-storage", "nlp"]) == 2
