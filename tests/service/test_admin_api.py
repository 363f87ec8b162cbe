"""Teams and keys over the API (admin), and the bootstrap admin key."""

from __future__ import annotations

import stat

from fastapi.testclient import TestClient

from service.config import Settings
from service.main import create_app
from tests.service.fakes import FakeRay, FakeTracker
from tests.service.utils import auth, spec


def test_create_list_update_teams_and_issue_keys(client: TestClient, admin_key: str) -> None:
    body = {"name": "nlp", "gpu_quota": 2, "max_concurrent_jobs": 3, "weight": 2, "default_priority": 5,
            "max_priority": 5, "cpu_quota": 16}  # fmt: skip
    created = client.post("/api/v1/teams", json=body, headers=auth(admin_key))
    assert (
        created.status_code == 201 and created.json()["gpu_quota"] == 2 and created.json()["cpu_quota"] == 16
    )
    above = client.post("/api/v1/teams", json={"name": "x", "default_priority": 9}, headers=auth(admin_key))
    assert above.status_code == 422  # a default above the team's maximum
    assert client.post("/api/v1/teams", json=body, headers=auth(admin_key)).status_code == 409
    bad = client.post("/api/v1/teams", json={"name": "Not A Slug"}, headers=auth(admin_key))
    assert bad.status_code == 422 and bad.json()["field"] == "name"
    patched = client.patch("/api/v1/teams/nlp", json={"gpu_quota": 1}, headers=auth(admin_key)).json()
    assert patched["gpu_quota"] == 1 and patched["weight"] == 2  # unset fields stay
    assert client.get("/api/v1/teams", headers=auth(admin_key)).json()["count"] == 1
    assert client.get("/api/v1/teams/none", headers=auth(admin_key)).status_code == 404

    issued = client.post("/api/v1/teams/nlp/keys", json={"name": "ci"}, headers=auth(admin_key))
    assert issued.status_code == 201
    key = issued.json()["key"]
    job = client.post("/api/v1/jobs", json=spec(), headers=auth(key)).json()
    assert job["team"] == "nlp" and job["priority"] == 5  # the team's default priority
    explicit = client.post("/api/v1/jobs", json=spec(priority=-3), headers=auth(key)).json()
    assert explicit["priority"] == -3
    greedy = client.post("/api/v1/jobs", json=spec(priority=50), headers=auth(key)).json()
    assert greedy["field"] == "priority" and "maximum priority of 5" in greedy["detail"]
    listed = client.get("/api/v1/teams/nlp/keys", headers=auth(admin_key)).json()
    assert listed["count"] == 1 and "key" not in listed["data"][0]


def test_bootstrap_writes_an_admin_key_once_to_a_private_file(settings: Settings, capsys) -> None:  # type: ignore[no-untyped-def]
    settings = settings.model_copy(update={"bootstrap_admin": True})
    app = create_app(settings, ray=FakeRay(), tracker=FakeTracker(), run_engine=False)
    with TestClient(app) as client:
        printed = capsys.readouterr().out
        path = settings.data_dir / "admin-key"
        assert f"written to {path} (mode 0600)" in printed and "smt_" not in printed  # never on a log
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        key = path.read_text().strip()
        assert key.startswith("smt_")
        assert client.get("/api/v1/teams", headers=auth(key)).status_code == 200
    with TestClient(create_app(settings, ray=FakeRay(), tracker=FakeTracker(), run_engine=False)):
        assert "admin key" not in capsys.readouterr().out
    assert path.read_text().strip() == key  # written once, never replaced


def test_a_team_setting_too_large_for_the_store_is_a_422_naming_it(
    client: TestClient, admin_key: str
) -> None:
    """Schemathesis sent max_concurrent_jobs = 2**70: SQLite's INTEGER overflowed into a 500."""
    client.post("/api/v1/teams", json={"name": "nlp"}, headers=auth(admin_key))
    refused = client.patch("/api/v1/teams/nlp", json={"max_concurrent_jobs": 2**70}, headers=auth(admin_key))
    assert refused.status_code == 422 and refused.json()["field"] == "max_concurrent_jobs"
