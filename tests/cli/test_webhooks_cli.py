"""`smartune webhooks add | list | deliveries | rm` against the app (fake Ray), through the SDK."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

import smartune
from cli import client_cmd, webhooks_cmd
from cli.main import main
from service.engine.rounds import Engine
from service.store import outbox
from tests.service.fakes import FakeRay, FakeTracker, summary_for
from tests.service.utils import submit
from tests.service.webhook_utils import Receiver

URL = "https://93.184.215.14/hooks/smartune"  # an address: nothing to resolve


@pytest.fixture
def cli(client: TestClient, team_key: str, monkeypatch: Any) -> None:
    monkeypatch.setattr(client_cmd, "connect", lambda _args: smartune.Client(key=team_key, http=client))


def test_add_list_deliveries_and_remove(
    cli: None, client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay,
    fake_tracker: FakeTracker, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    assert main(["webhooks", "add", URL, "--event", "job.succeeded", "--json"]) == 0
    created = json.loads(capsys.readouterr().out)
    assert created["events"] == ["job.succeeded"] and created["secret"].startswith("whsec_")
    hook_id = created["id"]
    assert main(["webhooks", "add", URL]) == 0
    out = capsys.readouterr().out
    assert f"of team nlp: {URL} (job.succeeded, job.failed, job.lost)" in out and "secret: whsec_" in out
    assert main(["webhooks", "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == 2 and listed[0].split()[:3] == [str(hook_id), "nlp", "job.succeeded"]
    assert main(["webhooks", "deliveries", str(hook_id)]) == 0
    assert capsys.readouterr().out == "no deliveries yet\n"

    receiver = Receiver()
    receiver.answers = [502, 502]  # both webhooks hear of the job: each attempt answered 502
    engine.notifier.transport = httpx.MockTransport(receiver)
    job_id = submit(client, team_key)["id"]
    engine.tick()
    fake_tracker.log_trial(job_id, "t1", "TERMINATED", 0.7, epoch=1)
    fake_tracker.summaries[job_id] = summary_for(job_id)
    fake_ray.set(f"{job_id}-a1", "SUCCEEDED")
    engine.tick()
    engine.notifier.drain()
    assert main(["webhooks", "deliveries", str(hook_id)]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["ID", "EVENT", "STATE", "TRIES", "LAST", "NEXT"]
    assert row.split()[1:5] == ["job.succeeded", "PENDING", "1", "502"]

    assert main(["webhooks", "rm", str(hook_id)]) == 0
    assert capsys.readouterr().out == f"deleted webhook {hook_id} ({URL})\n"
    assert main(["webhooks", "rm", str(hook_id)]) == 5  # not found (cli.exit_codes)
    assert f"webhook {hook_id} not found" in capsys.readouterr().err


def test_a_refused_url_is_one_line_naming_the_field(cli: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["webhooks", "add", "http://127.0.0.1:8080/x"]) == 7  # rejected
    err = capsys.readouterr().err
    assert err.startswith("smartune webhooks: error: 422: url: 127.0.0.1 is a loopback address")


def test_the_command_offers_the_service_s_events() -> None:
    assert webhooks_cmd.EVENTS == outbox.EVENTS
