"""The job store's plumbing: engines, sessions, the declarative base, migrations. No tables here.

SQLite (the embedded default) runs in WAL mode with two engines on one file: reads begin deferred
transactions and never block, writes begin `BEGIN IMMEDIATE` so that concurrent writers queue on the
busy timeout instead of failing with "database is locked" when a read lock cannot be upgraded.
PostgreSQL needs neither trick: both engines are the same. Migrations run at start-up (or in a prestart
step, `smartune migrate --wait S`), never at import.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy.exc
from sqlalchemy import DateTime, Engine, create_engine, event, text
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.types import TypeDecorator

ALEMBIC_DIR = Path(__file__).with_name("alembic")


class Base(DeclarativeBase):
    pass


class UTCDateTime(TypeDecorator[datetime]):
    """Timestamps stored as naive UTC (SQLite keeps no zone) and read back as aware UTC."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return value.replace(tzinfo=UTC) if value is not None else None


def utcnow() -> datetime:
    return datetime.now(UTC)


def _sqlite_engine(url: str, *, begin: str, timeout_s: float, lock: threading.Lock | None = None) -> Engine:
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": timeout_s},
        pool_size=48,  # >= the request thread pool: an SQLite connection is cheap to keep, slow-ish to open
        max_overflow=16,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves (SQLAlchemy's pysqlite recipe)
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(timeout_s * 1000)}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        if lock is not None:  # writers of this process queue here, in order, instead of in SQLite's busy loop
            lock.acquire()
            conn.info["holds_write_lock"] = True
        conn.exec_driver_sql(begin)

    def _release(conn: Any, *_args: Any) -> None:
        if lock is not None and conn.info.pop("holds_write_lock", False):
            lock.release()

    event.listen(engine, "commit", _release)
    event.listen(engine, "rollback", _release)
    event.listen(engine.pool, "checkin", lambda _dbapi, record: _release(record))
    return engine


@dataclass(frozen=True)
class Database:
    """The engines and session factories of one job store."""

    url: str
    engine: Engine  # reads
    write_engine: Engine  # writes (the same engine outside SQLite)
    sessions: sessionmaker[Session]
    write_sessions: sessionmaker[Session]

    @property
    def is_sqlite(self) -> bool:
        return self.url.startswith("sqlite")

    def dispose(self) -> None:
        self.engine.dispose()
        if self.write_engine is not self.engine:
            self.write_engine.dispose()


def normalize_url(url: str) -> str:
    """Give bare PostgreSQL URLs a driver that is installed (SQLAlchemy 2.1 defaults to psycopg 3)."""
    scheme, sep, rest = url.partition("://")
    if scheme.startswith("postgres") and not (
        importlib.util.find_spec("psycopg") or importlib.util.find_spec("psycopg2")
    ):
        raise ValueError(
            "DATABASE_URL names PostgreSQL but no driver is installed: pip install 'smartune[postgres]'"
        )
    if scheme in ("postgres", "postgresql"):
        scheme = "postgresql+psycopg" if importlib.util.find_spec("psycopg") else "postgresql+psycopg2"
    return f"{scheme}{sep}{rest}"


def connect(url: str, *, timeout_s: float = 5.0) -> Database:
    """Open a job store (creating the SQLite file's folder); no schema changes.

    `timeout_s` bounds every wait for the database: SQLite's busy timeout; PostgreSQL's connect timeout
    and lock timeout. A request that would wait longer fails (a 503 the client may retry) instead of
    holding a worker thread while a lock is held elsewhere."""
    url = normalize_url(url)
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        read, write = (
            _sqlite_engine(url, begin="BEGIN", timeout_s=timeout_s),
            _sqlite_engine(url, begin="BEGIN IMMEDIATE", timeout_s=timeout_s, lock=threading.Lock()),
        )
    else:
        options = {
            "connect_timeout": max(1, int(timeout_s)),
            "options": f"-c lock_timeout={int(timeout_s * 1000)}",
        }
        read = write = create_engine(
            url,
            pool_pre_ping=True,
            pool_size=10,
            max_overflow=30,
            pool_timeout=timeout_s,
            connect_args=options,
        )
    return Database(
        url=url,
        engine=read,
        write_engine=write,
        sessions=sessionmaker(read, expire_on_commit=False),
        write_sessions=sessionmaker(write, expire_on_commit=False),
    )


def wait_until_reachable(db: Database, wait_s: float, *, interval_s: float = 1.0) -> int:
    """Ping the database until it answers or `wait_s` seconds pass (then raise the last error); return
    the number of failed pings. For a prestart step that starts beside the database."""
    deadline = time.monotonic() + wait_s
    failures = 0
    while True:
        try:
            with db.engine.connect() as connection:
                connection.execute(text("SELECT 1"))
            return failures
        except sqlalchemy.exc.OperationalError:
            failures += 1
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            time.sleep(min(interval_s, left))


def migrate(db: Database, revision: str = "head") -> None:
    """Bring the schema to `revision` with Alembic (idempotent)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(ALEMBIC_DIR))
    with db.write_engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def iter_session(factory: sessionmaker[Session]) -> Iterator[Session]:
    with factory() as session:
        yield session
