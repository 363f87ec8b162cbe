"""Integration fixtures, shared per test session: one PostgreSQL server and, from tests/conftest.py, the one
Ray head (4 CPUs, 2 logical GPUs, token auth) that the sweep tests share too. The service-test fixtures are
imported too, so API tests can rerun on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.service.fixtures import *  # noqa: F403
from tests.support.cluster import Postgres, RayHead, Server, make_server, start_postgres


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    try:
        server = start_postgres()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    yield server
    server.stop()


@pytest.fixture
def server(tmp_path: Path, ray_head: RayHead, glue_dir: Path) -> Iterator[Server]:
    server = make_server(tmp_path, ray_address=ray_head.address, **ray_head.declared()).start()
    yield server
    server.stop()
