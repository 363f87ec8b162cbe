"""A custom-function job over REST (issue 33): its own axes pass only with `function` (else the 422 names
`search_space.axes`), a malformed entrypoint is a 422 naming `function.entrypoint`, and the dry run counts
its trials (trial configs x its own grid) and prices them at `function.max_minutes`, or says it cannot."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.service.utils import auth, spec

FUNCTION = {"entrypoint": "examples.custom_function.linear_probe:train", "metric": "accuracy"}
OWN_AXES = {"axes": {"learning_rate": {"values": [0.1, 0.5]}, "features": {"values": [8, 16, 32]}}}


def post(client: TestClient, key: str, body: dict[str, Any], dry_run: bool = False) -> Any:
    params = {"dry_run": "true"} if dry_run else {}
    return client.post("/api/v1/jobs", params=params, json=body, headers=auth(key))


def test_own_axes_and_the_entrypoint_are_checked_naming_the_field(client: TestClient, team_key: str) -> None:
    refused = post(client, team_key, spec(search_space=OWN_AXES))
    assert refused.status_code == 422 and refused.json()["field"] == "search_space.axes", refused.text
    assert "cannot sweep features" in refused.text
    bad = post(client, team_key, spec(function={"entrypoint": "os.system('x')"}))
    assert bad.status_code == 422 and bad.json()["field"] == "function.entrypoint", bad.text
    accepted = post(client, team_key, spec(function=FUNCTION, search_space=OWN_AXES))
    assert accepted.status_code == 201, accepted.text
    job = client.get(f"/api/v1/jobs/{accepted.json()['id']}", headers=auth(team_key)).json()
    assert job["spec"]["function"] == {**FUNCTION, "mode": "max", "max_minutes": None}


def test_a_dry_run_counts_and_prices_function_trials(client: TestClient, team_key: str) -> None:
    priced = post(
        client, team_key, spec(function={**FUNCTION, "max_minutes": 3}, search_space=OWN_AXES), True
    )
    assert priced.status_code == 200, priced.text
    plan = priced.json()
    assert plan["trials"] == 6 and plan["cells"] == 2 and plan["unknown"] == []
    assert plan["device_hours"] == 6 * 3 / 60  # one CPU per trial, 3 minutes each
    unpriced = post(client, team_key, spec(function=FUNCTION, search_space=OWN_AXES), True).json()
    assert unpriced["device_hours"] is None and "function.max_minutes" in unpriced["unknown"][0]
