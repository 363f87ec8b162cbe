"""Fixtures of the service tests; tests/integration imports them too (to rerun the API tests on PostgreSQL).

The app runs with fake Ray and MLflow adapters and without its engine thread: tests drive the engine one
round at a time with `engine.tick()`. `db_url` is the seam: SQLite in a temp folder here, a fresh
PostgreSQL database in tests/integration.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.config import Settings
from service.db import Database
from service.engine import Engine
from service.main import create_app
from tests.service.fakes import FakeRay, FakeTracker
from tests.service.utils import make_admin, make_team


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'smartune.db'}"


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    root = tmp_path / "data-root"
    (root / "rte").mkdir(parents=True)
    return root


@pytest.fixture
def settings(tmp_path: Path, db_url: str, data_root: Path) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        database_url=db_url,
        ray_address="http://ray.invalid:8265",
        mlflow_tracking_uri="sqlite:///unused",
        mlflow_ui_url="http://mlflow.test",
        mlflow_ui_protected=True,  # links are handed out only for a UI behind authentication
        data_roots=[data_root],
        glue_dir=None,
        bootstrap_admin=False,
        max_cells=64,
        max_seeds=5,
        default_max_concurrent_jobs=4,
        capacity_ttl_s=0,
        ready_ttl_s=0,
        max_body_bytes=64 * 1024,
    )


@pytest.fixture
def fake_ray() -> FakeRay:
    return FakeRay()


@pytest.fixture
def fake_tracker() -> FakeTracker:
    return FakeTracker()


@pytest.fixture
def app(settings: Settings, fake_ray: FakeRay, fake_tracker: FakeTracker) -> FastAPI:
    return create_app(settings, ray=fake_ray, tracker=fake_tracker, run_engine=False)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def db(client: TestClient) -> Database:
    return client.app.state.db  # type: ignore[attr-defined,no-any-return]


@pytest.fixture
def engine(client: TestClient) -> Engine:
    return client.app.state.engine  # type: ignore[attr-defined,no-any-return]


@pytest.fixture
def admin_key(db: Database) -> str:
    return make_admin(db)


@pytest.fixture
def team_key(db: Database) -> str:
    """A key of team `nlp` (no GPU quota)."""
    return make_team(db, "nlp")


@pytest.fixture
def other_key(db: Database) -> str:
    """A key of another team, `vision`."""
    return make_team(db, "vision")
