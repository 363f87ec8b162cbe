"""Fixtures of the service tests; tests/integration imports them too (to rerun the API tests on PostgreSQL).

The app runs with fake Ray and MLflow adapters and without its engine thread: tests drive the engine one
round at a time with `engine.tick()`. `db_url` is the seam: here a copy of a SQLite file migrated once per
session, a fresh PostgreSQL database in tests/integration (which the app migrates at start-up).
"""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.config import Settings
from service.engine.rounds import Engine
from service.main import create_app
from service.store.db import Database
from tests.service.fakes import FakeRay, FakeTracker
from tests.service.utils import make_admin, make_team
from tests.support import store_templates


@pytest.fixture(scope="session")
def migrated_sqlite() -> Path:
    """A SQLite job store migrated to head once per process (per xdist worker): a fresh migration costs
    about 0.4 s, a copy a millisecond. The migrations themselves are tested on `empty_db_url`."""
    return store_templates.templates() / store_templates.JOB_STORE


@pytest.fixture
def db_url(tmp_path: Path, migrated_sqlite: Path) -> str:
    """A migrated SQLite store of the test's own (a copy); the app's start-up migration finds it at head."""
    path = tmp_path / "smartune.db"
    shutil.copyfile(migrated_sqlite, path)
    return f"sqlite:///{path}"


@pytest.fixture
def empty_db_url(tmp_path: Path) -> str:
    """A SQLite store that does not exist yet: for the tests of the migrations themselves."""
    return f"sqlite:///{tmp_path / 'empty.db'}"


@pytest.fixture(autouse=True)
def dataset_check_in_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """An upload's rows are read by `python -m worker.training.dataset_check` in a child interpreter
    (service.datasets.validate): in the unit tier the same program runs in-process, with the same argv and
    the child's SMARTUNE_DATA_ROOTS, so no interpreter starts. Integration tests run the real child
    (test_datasets_api.py::test_the_rows_are_read_by_a_child_interpreter)."""
    if request.node.get_closest_marker("unit") is None:
        return
    from service.datasets import validate
    from worker.training import dataset_check
    from worker.training.files import DATA_ROOTS_ENV

    def run(command: list[str], *, timeout: float, env: dict[str, str], **_options: Any) -> Any:
        assert command[1:3] == ["-m", validate.CHECK_MODULE], command
        out = io.StringIO()
        with pytest.MonkeyPatch.context() as child, contextlib.redirect_stdout(out):
            child.setenv(DATA_ROOTS_ENV, env[DATA_ROOTS_ENV])
            code = dataset_check.main(command[3:])
        return subprocess.CompletedProcess(command, code, out.getvalue(), "")

    monkeypatch.setattr(
        validate, "subprocess", SimpleNamespace(run=run, TimeoutExpired=subprocess.TimeoutExpired)
    )


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
