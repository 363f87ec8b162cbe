"""Webhooks for real: a `smartune serve` that allows private addresses (its receiver is on 127.0.0.1) runs a
tiny real job; the test's own HTTP server answers the delivery 500 three times, then 200. The fourth
attempt delivers, signed with the secret shown at registration, and the delivery's record says 4 attempts
and a last status of 200. On a server with the default settings a loopback URL is refused (422, `url`)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from smartune.webhooks import verify
from tests.integration.client import ONE_TRIAL, Api, tiny_spec
from tests.support.cluster import RayHead, Server, free_port, make_server


@dataclass
class Received:
    """What the receiver got: each request's headers and body, and how it answered."""

    answers: list[int] = field(default_factory=lambda: [500, 500, 500])  # then 200
    requests: list[tuple[dict[str, str], bytes, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def receiver() -> Iterator[tuple[str, Received]]:
    """A tiny HTTP server of the test's own on 127.0.0.1: the webhook's receiver."""
    got = Received()

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802  (http.server's name)
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with got.lock:
                status = got.answers.pop(0) if got.answers else 200
                got.requests.append(({k.lower(): v for k, v in self.headers.items()}, body, status))
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:  # quiet
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{http.server_address[1]}/hooks/smartune", got
    http.shutdown()
    http.server_close()


@pytest.fixture
def server(tmp_path: Path, ray_head: RayHead, glue_dir: Path) -> Iterator[Server]:
    """Private addresses allowed (the receiver is on loopback), retries 0.3 s, 0.6 s, 1.2 s apart."""
    server = make_server(
        tmp_path,
        ray_address=ray_head.address,
        **ray_head.declared(),
        SMARTUNE_WEBHOOK_ALLOW_PRIVATE="1",
        SMARTUNE_WEBHOOK_BACKOFF_S="0.3",
        SMARTUNE_WEBHOOK_MAX_ATTEMPTS="5",
    ).start()
    yield server
    server.stop()


def test_a_real_job_s_end_reaches_a_real_receiver_signed_on_the_fourth_attempt(
    server: Server, receiver: tuple[str, Received]
) -> None:
    url, got = receiver
    admin = Api(server, server.admin_key())
    team = Api(server, admin.team_key("nlp"))
    hook = team("POST", "/api/v1/webhooks", expect=201, json={"url": url, "events": ["job.succeeded"]}).json()
    job_id = team.submit(tiny_spec(method="vanilla", search_space=ONE_TRIAL))  # the cheapest real job
    team.wait(job_id, lambda j: j["state"] == "SUCCEEDED", timeout=300)

    deadline = time.monotonic() + 60
    while True:
        [delivery] = team("GET", f"/api/v1/webhooks/{hook['id']}/deliveries").json()["data"]
        if delivery["state"] != "PENDING":
            break
        assert time.monotonic() < deadline, delivery
        time.sleep(0.3)
    assert delivery["state"] == "DELIVERED", delivery
    assert delivery["attempts"] == 4 and delivery["last_status"] == 200 and delivery["last_error"] is None
    assert delivery["next_attempt_at"] is None and delivery["event"] == "job.succeeded"

    assert [status for _h, _b, status in got.requests] == [500, 500, 500, 200]
    headers, body, _status = got.requests[-1]
    assert verify(hook["secret"], body, headers["smartune-signature"])  # as a receiver checks it
    assert not verify(hook["secret"], body + b" ", headers["smartune-signature"])
    assert headers["smartune-event"] == "job.succeeded" and headers["content-type"] == "application/json"
    assert headers["smartune-delivery"] == str(delivery["id"])
    assert len({b for _h, b, _s in got.requests}) == 1  # one event, the same body on every attempt
    sent = json.loads(body)
    assert sent["type"] == "job.succeeded" and sent["team"] == "nlp" and sent["id"] == delivery["event_id"]
    assert sent["data"]["job_id"] == job_id and sent["data"]["state"] == "SUCCEEDED"


def test_a_loopback_url_is_refused_where_private_addresses_are_not_allowed(tmp_path: Path) -> None:
    """A server with the default settings (no Ray needed: registration calls none)."""
    server = make_server(tmp_path, ray_address=f"http://127.0.0.1:{free_port()}").start()
    try:
        team = Api(server, Api(server, server.admin_key()).team_key("nlp"))
        refused = team("POST", "/api/v1/webhooks", expect=422, json={"url": "http://127.0.0.1:9/hook"}).json()
        assert refused["field"] == "url" and "127.0.0.1 is a loopback address" in refused["detail"]
        assert team("GET", "/api/v1/webhooks").json()["count"] == 0
    finally:
        server.stop()
