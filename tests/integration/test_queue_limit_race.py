"""A team's jobs submitted side by side on PostgreSQL stay within its queue limit. PostgreSQL runs several
writes at once (SQLite one), and each submission's check counted only the jobs committed before it, so two
submissions into a queue with room for one were both accepted. service.admission.admit now locks the
team's row until the job is committed.

To make the two submissions overlap every time, a third connection holds a SHARE lock on `jobs` (reads
pass, inserts wait) until both requests wait on a lock, then lets them go. The server's Ray address
answers nothing, so the queued job stays queued."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg2
import pytest

from tests.integration.client import Api, tiny_spec
from tests.support.cluster import Server, free_port, make_server
from tests.support.postgres import Postgres


def _requests_waiting(database: str) -> int:
    """Backends of `database` waiting on a lock to queue a job, or to lock its team's row first."""
    with psycopg2.connect(database) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT count(DISTINCT pid) FROM pg_locks JOIN pg_stat_activity USING (pid) "
                       "WHERE NOT granted AND datname = current_database() "
                       "AND (query ILIKE 'INSERT INTO jobs%' OR query ILIKE '%FOR UPDATE%')")  # fmt: skip
        return int(cursor.fetchone()[0])


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

    holder = psycopg2.connect(database)
    try:
        with holder.cursor() as cursor:
            cursor.execute("LOCK TABLE jobs IN SHARE MODE")  # held until rollback
        with ThreadPoolExecutor(2) as pool:
            answers = [pool.submit(submit, i) for i in range(2)]
            deadline = time.monotonic() + 60
            while _requests_waiting(database) < 2:  # one waits to insert, the other on it (or both to insert)
                assert time.monotonic() < deadline and not any(a.done() for a in answers), [
                    a.result().text for a in answers if a.done()
                ]
                time.sleep(0.2)
            holder.rollback()
            statuses = sorted(a.result().status_code for a in answers)
    finally:
        holder.close()
    assert statuses == [201, 429], [a.result().text[:300] for a in answers]
    queued = Api(server, key)("GET", "/api/v1/jobs", params={"state": "QUEUED"}).json()["data"]
    assert len(queued) == 1, queued
