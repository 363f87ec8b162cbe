"""A 422 for an unknown spec field names the field it probably meant (the issue's `training.epsilon`)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.service.utils import QUICK_SPEC, auth


def _refusal(client: TestClient, key: str, spec: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/api/v1/jobs", json=spec, headers=auth(key))
    assert response.status_code == 422, response.text
    return dict(response.json())


@pytest.mark.parametrize(
    ("change", "field", "hint"),
    [
        ({"training": {**QUICK_SPEC["training"], "epsilon": 1e-4}}, "training.epsilon",
         "did you mean `method_params.epsilon`?"),
        ({"training": {**QUICK_SPEC["training"], "lerning_rate": 1e-4}}, "training.lerning_rate",
         "did you mean `training.learning_rate`?"),
        ({"method_params": {"epochs": 2}}, "method_params", "did you mean `training.epochs`?"),
        ({"resources": {"cpus": 1, "gpu": 0}}, "resources.gpu", "did you mean `resources.gpus`?"),
    ],
)  # fmt: skip
def test_the_refusal_names_the_field_meant(
    client: TestClient, team_key: str, change: dict[str, Any], field: str, hint: str
) -> None:
    body = _refusal(client, team_key, {**QUICK_SPEC, **change})
    assert body["field"] == field and hint in body["detail"] and hint in body["errors"][0]["msg"]


def test_no_hint_when_nothing_is_close(client: TestClient, team_key: str) -> None:
    body = _refusal(client, team_key, {**QUICK_SPEC, "zzz": 1})
    assert body["detail"] == "zzz: Extra inputs are not permitted"
