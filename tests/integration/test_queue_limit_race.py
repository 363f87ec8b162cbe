"""A team's jobs submitted side by side on PostgreSQL stay within its queue limit. PostgreSQL runs several
writes at once (SQLite one), and each submission's check counted only the jobs committed before it, so two
submissions into a queue with room for one were both accepted. service.admission.admit now locks the
team's row until the job is committed.

To make the two submissions overlap every time, a third connection holds a SHARE lock on `jobs` (reads
pass, inserts wait) until both requests wait on a lock, then lets them go. The server's Ray address
answers nothing, so the queued job stays queued."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.client import Api, tiny_spec
from tests.support.cluster import Server, free_port, make_server
from tests.support.pg_race import side_by_side, waiting_backends
from tests.support.postgres import Postgres


@pytest.fixture
def database(postgres: Postgres) -> str:
    return postgres.create_database(f"queue_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def server(tmp_path: Path, database: str, glue_dir: Path) -> Iterator[Server]:
    """On PostgreSQL, a queue of one job per team, a pool declared (its Ray address answers nothing)."""
    server = make_server(
        tmp_path,
        ray_address=f"http://127.0.0.1:{free_port()}",
        database_url=database,
        SMARTUNE_MAX_QUEUED_JOBS_PER_TEAM="1",
        SMARTUNE_LARGEST_NODE_CPUS="4",
        SMARTUNE_LARGEST_NODE_GPUS="0",
        SMARTUNE_GLUE_DIR=str(glue_dir),
    )
    yield server.start()
    server.stop()


def test_jobs_submitted_side_by_side_stay_within_the_queue_limit(server: Server, database: str) -> None:
    admin = Api(server, server.admin_key())
    key = admin.team_key("nlp")

    def submit(i: int) -> httpx.Response:
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=90
        ) as http:
            return http.post("/api/v1/jobs", json=tiny_spec(name=f"side-by-side {i}", seeds=[i + 1]))

    # one waits to insert, the other to lock the team's row first (or both to insert, without the lock)
    waiting = lambda: waiting_backends(database, ["INSERT INTO jobs%", "%FOR UPDATE%"])  # noqa: E731
    answers = side_by_side(database, "jobs", [lambda i=i: submit(i) for i in range(2)], waiting)
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [201, 429], [a.text[:300] for a in answers]
    queued = Api(server, key)("GET", "/api/v1/jobs", params={"state": "QUEUED"}).json()["data"]
    assert len(queued) == 1, queued
