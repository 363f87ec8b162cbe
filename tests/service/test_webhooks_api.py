"""The webhooks API: a team registers, lists and deletes its own webhooks and reads their deliveries; another
team's are a 404, an admin sees and deletes them all; bad URLs and events are 422s naming the field."""

from __future__ import annotations

import ipaddress

from fastapi.testclient import TestClient

from service.config import Settings
from tests.service.utils import auth
from tests.service.webhook_utils import URL, Receiver, add


def _listed(client: TestClient, key: str) -> list[int]:
    response = client.get("/api/v1/webhooks", headers=auth(key))
    assert response.status_code == 200, response.text
    return [hook["id"] for hook in response.json()["data"]]


def test_a_team_sees_and_manages_only_its_own_webhooks(
    client: TestClient, team_key: str, other_key: str, admin_key: str, receiver: Receiver
) -> None:
    mine = add(client, team_key, events=["job.succeeded", "budget.80", "job.succeeded"])
    assert mine["team"] == "nlp" and mine["url"] == URL and mine["events"] == ["job.succeeded", "budget.80"]
    assert mine["secret"].startswith("whsec_") and len(mine["secret"]) == 70
    theirs = add(client, other_key, url="https://ci.example.com/x")
    assert theirs["events"] == ["job.succeeded", "job.failed", "job.lost"]  # the default
    listed = client.get("/api/v1/webhooks", headers=auth(team_key)).json()
    assert listed["count"] == 1 and listed["data"][0]["id"] == mine["id"]
    assert "secret" not in listed["data"][0]  # shown once, at creation
    assert _listed(client, other_key) == [theirs["id"]]
    assert _listed(client, admin_key) == [mine["id"], theirs["id"]]

    for method, path in (("GET", f"/api/v1/webhooks/{mine['id']}/deliveries"), ("DELETE", f"/api/v1/webhooks/{mine['id']}")):  # fmt: skip
        refused = client.request(method, path, headers=auth(other_key))
        assert refused.status_code == 404 and refused.json()["detail"] == f"webhook {mine['id']} not found"
    assert _listed(client, team_key) == [mine["id"]]  # still there

    assert (
        client.get(f"/api/v1/webhooks/{mine['id']}/deliveries", headers=auth(admin_key)).json()["count"] == 0
    )
    deleted = client.delete(f"/api/v1/webhooks/{mine['id']}", headers=auth(team_key))
    assert (
        deleted.status_code == 200 and deleted.json()["id"] == mine["id"] and "secret" not in deleted.json()
    )
    assert _listed(client, team_key) == []
    gone = client.get(f"/api/v1/webhooks/{mine['id']}/deliveries", headers=auth(team_key))
    assert gone.status_code == 404
    assert client.delete(f"/api/v1/webhooks/{theirs['id']}", headers=auth(admin_key)).status_code == 200
    assert _listed(client, admin_key) == []


def test_an_admin_key_without_a_team_registers_none(
    client: TestClient, admin_key: str, receiver: Receiver
) -> None:
    refused = add(client, admin_key, expect=403)
    assert "belongs to no team" in refused["detail"]


def test_bad_registrations_are_422s_naming_the_field(
    client: TestClient, team_key: str, receiver: Receiver
) -> None:
    cases = {
        "http://127.0.0.1:9000/hook": ("url", "127.0.0.1 is a loopback address"),
        "http://[fd00::5]/hook": ("url", "fd00::5 is a private address"),
        "https://intranet.example.com/hook": ("url", "resolves to 10.1.2.3, which is a private address"),
        "https://nowhere.example.com/hook": ("url", "does not resolve"),
        "ftp://hooks.example.com/x": ("url", "only http and https"),
        "": ("url", "at least 1 character"),
    }
    for url, (field, words) in cases.items():
        body = add(client, team_key, url=url, expect=422)
        assert body["field"] == field and words in body["detail"], (url, body)
    for events, field in ((["job.exploded"], "events.0"), ([], "events"), (["job.failed", 3], "events.1")):
        body = add(client, team_key, events=events, expect=422)  # type: ignore[arg-type]
        assert body["field"] == field, (events, body)
    extra = client.post("/api/v1/webhooks", json={"url": URL, "secret": "mine"}, headers=auth(team_key))
    assert extra.status_code == 422 and extra.json()["field"] == "secret"
    assert _listed(client, team_key) == []


def test_a_team_has_at_most_its_limit_of_webhooks(
    client: TestClient, team_key: str, settings: Settings, receiver: Receiver
) -> None:
    settings.webhook_max_per_team = 2
    for _ in range(2):
        add(client, team_key)
    refused = add(client, team_key, expect=409)
    assert "has 2 webhooks; the limit is 2" in refused["detail"]


def test_private_addresses_register_where_the_deployment_allows_them(
    client: TestClient, team_key: str, settings: Settings, receiver: Receiver
) -> None:
    settings.webhook_allow_cidrs = [ipaddress.ip_network("10.0.0.0/8")]
    add(client, team_key, url="https://intranet.example.com/hook")
    add(client, team_key, url="http://127.0.0.1:9000/hook", expect=422)
    settings.webhook_allow_private = True
    add(client, team_key, url="http://127.0.0.1:9000/hook")
