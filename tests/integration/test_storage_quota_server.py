"""Storage quotas on a real `smartune serve` (no Ray head: uploads and the engine's storage step need none,
and a submission is refused before any Ray call): an admin gives team nlp a small quota, nlp uploads until
the next upload would pass it (409 with the numbers), another team uploads the same unaffected, the engine
measures checkpoints written into nlp's Tune storage, and nlp's next job is refused (409)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.client import Api, tiny_spec
from tests.service.dataset_utils import rte_tsv
from tests.support.cluster import Server, free_port, make_server

QUOTA = 100_000  # bytes


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """A server whose Ray address answers nothing (a closed port) and whose engine measures every 0.5 s."""
    unreachable = f"http://127.0.0.1:{free_port()}"
    server = make_server(
        tmp_path, ray_address=unreachable, SMARTUNE_STORAGE_REFRESH_S="0.5", SMARTUNE_LARGEST_NODE_CPUS="4"
    ).start()  # a declared node (SMARTUNE_LARGEST_NODE_CPUS): jobs are admitted before the pool is read
    yield server
    server.stop()


def _upload(api: Api, name: str, offset: int, expect: int) -> Any:
    files = {"train.tsv": rte_tsv(600, offset), "dev.tsv": rte_tsv(40, offset)}  # about 36 kB together
    return api("POST", "/api/v1/datasets", expect=expect, data={"name": name, "task": "rte"},
               files=[("files", (n, d)) for n, d in files.items()])  # fmt: skip


def _storage(admin: Api, team: str) -> dict[str, Any]:
    return dict(admin("GET", f"/api/v1/teams/{team}").json()["storage"])


def test_a_team_is_held_to_its_storage_quota_and_others_are_not(server: Server) -> None:
    admin = Api(server, server.admin_key())
    nlp = Api(server, admin.team_key("nlp"))
    vision = Api(server, admin.team_key("vision"))
    admin("PATCH", "/api/v1/teams/nlp", json={"storage_quota_bytes": QUOTA})
    sizes = [_upload(nlp, f"part-{i}", i, 201).json()["size_bytes"] for i in range(2)]
    refused = _upload(nlp, "part-2", 2, 409)
    body = refused.json()
    assert body["storage"]["used_bytes"] == body["storage"]["datasets_bytes"] == sum(sizes)
    assert body["storage"]["quota_bytes"] == QUOTA
    assert body["storage"]["upload_bytes"] == int(refused.request.headers["content-length"])
    assert sum(sizes) + body["storage"]["upload_bytes"] > QUOTA
    assert "would exceed its storage quota" in body["detail"]
    for i in range(3):  # no quota of its own, none by default: the same uploads pass
        _upload(vision, f"part-{i}", i, 201)
    listed = {t["name"]: t["storage"] for t in admin("GET", "/api/v1/teams").json()["data"]}
    assert listed["nlp"]["used_bytes"] == sum(sizes) and listed["vision"]["quota_bytes"] is None

    checkpoint = server.data_dir / "ray_results" / "nlp" / "job-old" / "trial_a" / "checkpoint_000000"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trial_state.pt").write_bytes(b"w" * (QUOTA - sum(sizes)))  # exactly the rest
    deadline = time.monotonic() + 30
    while _storage(admin, "nlp")["checkpoints_bytes"] != QUOTA - sum(sizes):  # the engine's next measurement
        assert time.monotonic() < deadline, _storage(admin, "nlp")
        time.sleep(0.3)
    job = nlp("POST", "/api/v1/jobs", expect=409, json=tiny_spec()).json()
    assert job["storage"]["used_bytes"] == QUOTA and "has used its storage quota" in job["detail"]
