"""A held database lock stalls only the requests that wait for it, never the event loop: with another
process holding SQLite's write lock, `/healthz` and reads still answer at once, and a submission waits at
most the deployment's `db_timeout_s`, then answers 503 with `Retry-After` (it succeeds once the lock is
gone). A real uvicorn server, a real SQLite file, a real lock taken by another connection."""

from __future__ import annotations

import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from service.config import Settings
from service.main import create_app
from tests.service.fakes import FakeRay, FakeTracker
from tests.service.utils import QUICK_SPEC, make_team


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(settings: Settings) -> Iterator[tuple[str, Any]]:
    settings = settings.model_copy(update={"db_timeout_s": 1.0})
    app = create_app(settings, ray=FakeRay(), tracker=FakeTracker(), run_engine=False)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=_free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{server.config.port}", app
    server.should_exit = True
    thread.join(30)


def test_a_held_write_lock_stalls_only_the_writes_that_wait_for_it(served: tuple[str, Any]) -> None:
    url, app = served
    key = make_team(app.state.db, "nlp")
    headers = {"Authorization": f"Bearer {key}"}
    assert httpx.get(f"{url}/api/v1/jobs", headers=headers).status_code == 200  # the key is now cached
    holder = sqlite3.connect(str(app.state.settings.sqlalchemy_url).removeprefix("sqlite:///"), timeout=0)
    holder.execute("BEGIN IMMEDIATE")  # another process's write transaction: SQLite's one write lock
    try:
        answers: dict[str, httpx.Response] = {}
        submit = threading.Thread(
            target=lambda: answers.update(
                post=httpx.post(f"{url}/api/v1/jobs", json=QUICK_SPEC, headers=headers)
            )
        )
        submit.start()
        time.sleep(0.2)  # the submission now waits for the lock
        started = time.monotonic()
        assert httpx.get(f"{url}/healthz").status_code == 200
        assert httpx.get(f"{url}/api/v1/jobs", headers=headers).status_code == 200  # WAL: reads go on
        assert time.monotonic() - started < 0.5 and submit.is_alive()  # both answered while it waited
        submit.join(30)
        refused = answers["post"]
        assert refused.status_code == 503 and int(refused.headers["Retry-After"]) >= 1, refused.text
    finally:
        holder.rollback()
        holder.close()
    assert httpx.post(f"{url}/api/v1/jobs", json=QUICK_SPEC, headers=headers).status_code == 201
