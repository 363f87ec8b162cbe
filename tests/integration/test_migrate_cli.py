"""`smartune migrate --wait`: the prestart step of the team stack, against a real PostgreSQL that comes up
late, and a clear one-line failure when it never does."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import sqlalchemy

from tests.support.cluster import Postgres


def _migrate(url: str, wait_s: float, tmp_path: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "DATABASE_URL": url, "SMARTUNE_DATA_DIR": str(tmp_path)}
    cmd = [sys.executable, "-m", "cli.main", "migrate", "--wait", str(wait_s)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_migrate_waits_for_a_late_database_then_migrates(postgres: Postgres, tmp_path: Path) -> None:
    url = postgres.create_database("migrate_late")
    postgres.halt()
    resumed = threading.Timer(4.0, postgres.resume)
    resumed.start()
    try:
        process = _migrate(url, 60, tmp_path)
        out, _ = process.communicate(timeout=120)
    finally:
        resumed.join()
    assert process.returncode == 0, out
    assert "failed attempt" in out and "job store at revision head" in out
    tables = sqlalchemy.inspect(
        sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg2://"))
    )
    assert {"teams", "jobs", "alembic_version"} <= set(tables.get_table_names())


def test_migrate_says_in_one_line_when_the_database_never_answers(postgres: Postgres, tmp_path: Path) -> None:
    url = postgres.url.rsplit(":", 1)[0] + ":1/none"  # nothing listens on port 1
    started = time.monotonic()
    process = _migrate(url, 2, tmp_path)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 1, out
    assert time.monotonic() - started >= 2  # it did wait
    assert "the database did not answer within 2 s" in out and "Traceback" not in out
