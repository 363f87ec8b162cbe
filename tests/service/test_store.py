"""The job store: migrations match the models, keys, and SQLite's concurrent writers."""

from __future__ import annotations

import threading
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from service import security
from service.schemas import TeamCreate
from service.store import crud
from service.store.db import ALEMBIC_DIR, Base, connect, migrate


def test_migrations_build_exactly_the_models(empty_db_url: str) -> None:
    db = connect(empty_db_url)
    migrate(db)
    migrate(db)  # idempotent
    with db.engine.connect() as connection:
        diff = compare_metadata(
            MigrationContext.configure(connection, opts={"compare_type": True}), Base.metadata
        )
        assert diff == []
        version = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    assert version == "0009"
    assert {"teams", "api_keys", "jobs", "attempts", "trials", "job_transitions"} <= set(
        inspect(db.engine).get_table_names()
    )
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(ALEMBIC_DIR))
    with db.write_engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "base")
    assert "jobs" not in inspect(db.engine).get_table_names()
    db.dispose()


def test_sqlite_runs_in_wal_mode(db_url: str) -> None:
    db = connect(db_url)
    with db.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    db.dispose()


def test_importing_the_app_runs_no_migration(tmp_path: Path) -> None:
    import service.main  # noqa: F401

    assert list(tmp_path.iterdir()) == []


def test_concurrent_writers_queue_instead_of_failing(db_url: str) -> None:
    db = connect(db_url)
    migrate(db)
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            for i in range(10):
                with db.write_sessions() as session:
                    crud.get_team(
                        session=session, name="nobody"
                    )  # read first: the upgrade that deadlocks in WAL
                    crud.create_team(session=session, team_in=TeamCreate(name=f"t{n}-{i}"))
                    session.commit()
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with db.sessions() as session:
        assert len(crud.list_teams(session=session)) == 80
    db.dispose()


def test_key_format_and_verification() -> None:
    new = security.generate_key()
    assert new.key.startswith(f"smt_{new.key_id}_") and len(new.key_id) == 12
    assert security.parse_key_id(new.key) == new.key_id
    assert security.verify(new.key, new.digest)
    assert not security.verify(new.key + "x", new.digest)
    assert not security.verify(new.key, None)
    assert security.parse_key_id("smt_short_x") is None
    assert len({security.generate_key().key for _ in range(100)}) == 100
