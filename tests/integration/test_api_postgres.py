"""The API, engine and admin tests of tests/service, rerun on a real PostgreSQL server (one fresh database
per test on the session's server)."""

from __future__ import annotations

import uuid

import pytest

from tests.service.test_admin_api import *  # noqa: F403
from tests.service.test_auth import *  # noqa: F403
from tests.service.test_datasets_api import *  # noqa: F403
from tests.service.test_engine import *  # noqa: F403
from tests.service.test_jobs_api import *  # noqa: F403
from tests.service.test_store import (  # noqa: F401
    test_concurrent_writers_queue_instead_of_failing,
    test_migrations_build_exactly_the_models,
)
from tests.support.cluster import Postgres


@pytest.fixture
def db_url(postgres: Postgres) -> str:
    return postgres.create_database(f"t_{uuid.uuid4().hex[:12]}")
