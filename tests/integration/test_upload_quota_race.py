"""A team's uploads recorded side by side on PostgreSQL stay within its storage quota. PostgreSQL runs several
writes at once (SQLite one), and each upload's check saw only the uploads committed before it: the noisy
team of `smartune bench load --noisy-neighbour` got 4 uploads (249 kB) through a 200 kB quota that way.

To make the two recordings overlap every time, a third connection holds a SHARE lock on `datasets` (reads
pass, inserts wait) until both uploads are waiting on a lock, then lets them go."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.client import Api
from tests.service.dataset_utils import rte_tsv
from tests.support.cluster import Server, free_port, make_server
from tests.support.pg_race import side_by_side, waiting_backends
from tests.support.postgres import Postgres


@pytest.fixture
def database(postgres: Postgres) -> str:
    return postgres.create_database(f"race_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def server(tmp_path: Path, database: str) -> Iterator[Server]:
    """A server on PostgreSQL whose Ray address answers nothing: uploads need no Ray."""
    server = make_server(tmp_path, ray_address=f"http://127.0.0.1:{free_port()}", database_url=database)
    yield server.start()
    server.stop()


def test_uploads_recorded_side_by_side_stay_within_the_quota(server: Server, database: str) -> None:
    admin = Api(server, server.admin_key())
    key = admin.team_key("nlp")
    files = [{"train.tsv": rte_tsv(300 + i), "dev.tsv": rte_tsv(20)} for i in range(2)]  # distinct content
    size = sum(len(data) for data in files[1].values())
    admin("PATCH", "/api/v1/teams/nlp", json={"storage_quota_bytes": size + 1000})  # room for one of them

    def upload(i: int) -> httpx.Response:
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=90
        ) as http:
            return http.post("/api/v1/datasets", data={"name": f"part-{i}", "task": "rte"},
                             files=[("files", (n, d)) for n, d in files[i].items()])  # fmt: skip

    # both recordings are past their reads, or one waits on the other
    answers = side_by_side(database, "datasets", [lambda i=i: upload(i) for i in range(2)],
                           lambda: waiting_backends(database))  # fmt: skip
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [201, 409], [a.text[:300] for a in answers]
    storage = admin("GET", "/api/v1/teams/nlp").json()["storage"]
    assert storage["datasets_bytes"] <= size + 1000, storage
