"""A throwaway PostgreSQL 15 cluster (`initdb` + `postgres` on a free port, in a temp folder) for the
integration tests: `start_postgres()`, then `create_database`, `halt`/`resume` (a real outage) and `stop`
(which deletes it). Needs the server binaries (Debian's postgresql-15 package, or
SMARTUNE_PG_BIN pointing at them)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PG_BIN = Path(os.environ.get("SMARTUNE_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except RuntimeError:
            raise
        except Exception:  # noqa: BLE001 - not accepting connections yet
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def _stop(process: subprocess.Popen[Any]) -> None:
    """A fast shutdown (SIGINT to the group: connections are cut), then SIGKILL if it lingers."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(60)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


@dataclass
class Postgres:
    url: str  # of the `postgres` database; tests create their own
    process: subprocess.Popen[Any]
    data: Path
    user: str | None
    command: list[str]  # how the server was started: `resume` starts it again on the same port and data

    def create_database(self, name: str) -> str:
        import psycopg2

        connection = psycopg2.connect(self.url)
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
        connection.close()
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def halt(self) -> None:
        """Stop the server (a fast shutdown: connections are cut), keeping its data for `resume`."""
        _stop(self.process)

    def resume(self) -> None:
        self.process = _postmaster(self.command, self.url)

    def stop(self) -> None:
        self.halt()
        shutil.rmtree(self.data.parent, ignore_errors=True)


def start_postgres() -> Postgres:
    """A throwaway PostgreSQL 15 cluster on a free port, in its own temp folder (owned by `postgres` when
    running as root: the server refuses to run as root, and pytest's temp folders are root-only)."""
    if not (PG_BIN / "initdb").is_file():
        raise FileNotFoundError(f"PostgreSQL binaries not found in {PG_BIN}")
    home = Path(tempfile.mkdtemp(prefix="smartune-pg-"))
    data = home / "pgdata"
    user = "postgres" if os.geteuid() == 0 else None
    run_as = ["runuser", "-u", user, "--"] if user else []
    if user:
        shutil.chown(home, user)
    subprocess.run(
        [*run_as, str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        check=True,
        capture_output=True,
    )
    port = _free_port()
    cmd = [*run_as, str(PG_BIN / "postgres"), "-D", str(data), "-p", str(port), "-k", str(data)]
    cmd += ["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200"]
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    return Postgres(url, _postmaster(cmd, url), data, user, cmd)


def _postmaster(cmd: list[str], url: str) -> subprocess.Popen[Any]:
    """Start PostgreSQL with `cmd` and wait until it accepts connections at `url`."""
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)

    def up() -> bool:
        import psycopg2

        if process.poll() is not None:
            raise RuntimeError(
                f"postgres exited: {process.stderr.read().decode()[-2000:] if process.stderr else ''}"
            )
        psycopg2.connect(url).close()
        return True

    _wait(up, 60)
    return process
