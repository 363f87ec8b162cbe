"""A job spec's `peft` block over REST: a mistake is a 422 naming `peft.<field>`; a good one is stored as
given, with its defaults, and priced by the memory estimate (tests/service/test_lora_memory.py)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.service.utils import auth, spec

LORA = {"method": "lora", "r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}


def test_rest_names_the_field_of_a_bad_block(client: TestClient, team_key: str) -> None:
    refused = client.post("/api/v1/jobs", json=spec(peft={"method": "lora", "r": 0}), headers=auth(team_key))
    assert refused.status_code == 422 and refused.json()["field"] == "peft.r", refused.text
    accepted = client.post(
        "/api/v1/jobs", json=spec(model="tiny-random-llama", peft=LORA), headers=auth(team_key)
    )
    assert accepted.status_code == 201, accepted.text
    job = client.get(f"/api/v1/jobs/{accepted.json()['id']}", headers=auth(team_key)).json()
    assert job["spec"]["peft"] == {**LORA, "dropout": 0.0}
