"""A dry run (`POST /jobs?dry_run=true`, `smartune submit --estimate`) reports the team's storage against its
quota and whether the submission would be refused for it, as it reports the budget (issue 32)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

import smartune
from cli import client_cmd
from cli.main import main
from service.store.db import Database
from tests.service.dataset_utils import push, rte_files
from tests.service.utils import QUICK_SPEC, auth, make_team, spec


def _dry_run(client: TestClient, key: str) -> dict:
    response = client.post("/api/v1/jobs", params={"dry_run": "true"}, json=spec(), headers=auth(key))
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_a_dry_run_reports_the_storage_and_a_refusal_for_it(
    client: TestClient, db: Database, admin_key: str
) -> None:
    key = make_team(db, "nlp")
    size = push(client, key, rte_files(0)).json()["size_bytes"]
    unlimited = _dry_run(client, key)["storage"]
    assert unlimited == {**unlimited, "used_bytes": size, "datasets_bytes": size, "quota_bytes": None,
                         "fits": True, "refusal": None}  # fmt: skip
    client.patch("/api/v1/teams/nlp", json={"storage_quota_bytes": size + 1}, headers=auth(admin_key))
    under = _dry_run(client, key)["storage"]
    assert (under["used_bytes"], under["quota_bytes"], under["fits"]) == (size, size + 1, True)

    client.patch("/api/v1/teams/nlp", json={"storage_quota_bytes": size}, headers=auth(admin_key))
    full = _dry_run(client, key)  # 200: the refusal is reported, not raised
    refused = client.post("/api/v1/jobs", json=spec(), headers=auth(key))
    assert refused.status_code == 409
    assert full["storage"] == {
        **refused.json()["storage"],
        "fits": False,
        "refusal": refused.json()["detail"],
    }
    assert full["budget"]["fits"] is True  # the budget still reported beside it
    assert client.get("/api/v1/jobs", headers=auth(key)).json()["count"] == 0


def test_submit_estimate_prints_the_storage_and_the_refusal(
    client: TestClient,
    db: Database,
    admin_key: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    key = make_team(db, "nlp")
    size = push(client, key, rte_files(0)).json()["size_bytes"]
    client.patch("/api/v1/teams/nlp", json={"storage_quota_bytes": size}, headers=auth(admin_key))
    monkeypatch.setattr(client_cmd, "connect", lambda _args: smartune.Client(key=key, http=client))
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(QUICK_SPEC))
    assert main(["submit", str(spec_file), "--estimate"]) == 0
    out = capsys.readouterr().out
    assert (
        size < 1000 and f"storage: {size} B used (quota {size} B): datasets {size} B, checkpoints 0 B" in out
    )
    assert "a submission would be refused: team 'nlp' has used its storage quota" in out
