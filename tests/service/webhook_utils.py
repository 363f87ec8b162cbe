"""Helpers of the webhook tests: a name table for the resolver seam and a scripted receiver behind httpx's
MockTransport (the unit tier opens no socket; tests/integration/test_webhooks_server.py delivers for real)."""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from service.engine.rounds import Engine
from tests.service.utils import auth

PUBLIC = "93.184.215.14"
URL = "https://hooks.example.com/smartune"


class Names:
    """A resolver: host -> addresses, changeable mid-test (DNS that changes after registration)."""

    def __init__(self) -> None:
        self.table: dict[str, list[str]] = {
            "hooks.example.com": [PUBLIC],
            "ci.example.com": ["93.184.215.15"],
            "intranet.example.com": ["10.1.2.3"],
        }

    def __call__(self, host: str, port: int) -> list[str]:
        if host not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.table[host]


class Receiver:
    """Answers each request with the next status of `answers` (200 once they run out); keeps them all."""

    def __init__(self) -> None:
        self.answers: list[int] = []
        self.requests: list[httpx.Request] = []
        self.names = Names()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        return httpx.Response(self.answers.pop(0) if self.answers else 200)

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]


@pytest.fixture
def receiver(engine: Engine) -> Receiver:
    """The engine's notifier (and registration, which uses its resolver) wired to a fake receiver."""
    found = Receiver()
    engine.notifier.resolve = found.names
    engine.notifier.transport = httpx.MockTransport(found)
    return found


def add(
    client: TestClient, key: str, url: str = URL, events: list[str] | None = None, expect: int = 201
) -> dict[str, Any]:
    body: dict[str, Any] = {"url": url} | ({"events": events} if events is not None else {})
    response = client.post("/api/v1/webhooks", json=body, headers=auth(key))
    assert response.status_code == expect, response.text
    return dict(response.json())


def deliveries(client: TestClient, key: str, hook_id: int) -> list[dict[str, Any]]:
    response = client.get(f"/api/v1/webhooks/{hook_id}/deliveries", headers=auth(key))
    assert response.status_code == 200, response.text
    return list(response.json()["data"])


def deliver(engine: Engine) -> int:
    """One webhook step, its attempts run to their end; how many it started."""
    started = engine.notifier.tick()
    engine.notifier.drain()
    return started
