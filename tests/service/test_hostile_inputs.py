"""Hostile inputs over REST (issue 32): dataset rows built to crash the checker, names (of jobs, teams,
datasets, API keys), dataset descriptions and webhook URLs built to display as something else, and the
OpenAPI document stating the rules the server enforces on the upload's fields, those texts and the spec's
`task`. The real server is in tests/integration/test_hostile_inputs.py."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.datasets.upload import Form
from service.datasets.validate import fields
from service.errors import ApiError
from tests.service.dataset_utils import push, rte_files
from tests.service.utils import auth, spec
from worker.contract.names import HIDDEN_PATTERN

DEEP_ROW = '{"sentence1": ' + "[" * 100_000 + "]" * 100_000 + ', "sentence2": "b", "label": "entailment"}\n'
GOOD_RTE = b'{"sentence1": "a", "sentence2": "b", "label": "entailment"}\n'
HUGE_STSB = b'{"sentence1":"a","sentence2":"b","label":' + b"9" * 400 + b"}\n"
GOOD_STSB = b'{"sentence1": "a", "sentence2": "b", "label": 2.5}\n'
# Right-to-left override, zero-width space, the bidirectional isolates, a newline, a bell, a BOM.
HIDDEN = ["\u202e", "\u200b", "\u2066", "\u2067", "\u2068", "\u2069", "\n", "\x07", "\ufeff"]


@pytest.mark.parametrize(
    ("task", "files"),
    [
        ("rte", {"train.jsonl": DEEP_ROW.encode(), "dev.jsonl": GOOD_RTE}),
        ("stsb", {"train.jsonl": HUGE_STSB, "dev.jsonl": GOOD_STSB}),
    ],
    ids=["nested-100000-deep", "label-of-400-digits"],
)
def test_rows_built_to_crash_the_checker_are_a_422_naming_file_and_line(
    client: TestClient, team_key: str, task: str, files: dict[str, bytes]
) -> None:
    answer = push(client, team_key, files, task=task, expect=422).json()
    assert (answer["field"], answer["file"], answer["line"]) == ("files", "train.jsonl", 1), answer
    assert answer["detail"].startswith("files: train.jsonl line 1: ")


@pytest.mark.parametrize("char", HIDDEN, ids=[f"U+{ord(c):04X}" for c in HIDDEN])
def test_a_job_name_that_displays_otherwise_is_refused(client: TestClient, team_key: str, char: str) -> None:
    response = client.post("/api/v1/jobs", json=spec(name=f"quick{char}gpj.exe"), headers=auth(team_key))
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["field"] == "name" and f"U+{ord(char):04X}" in body["detail"], body
    assert char not in body["detail"]  # named by its code point, never echoed


def test_a_team_name_that_displays_otherwise_is_refused(client: TestClient, admin_key: str) -> None:
    body: dict[str, Any] = {"name": "nlp\u202ecod", "cpu_quota": 1}
    answer = client.post("/api/v1/teams", json=body, headers=auth(admin_key))
    assert answer.status_code == 422 and answer.json()["field"] == "name"
    assert "U+202E" in answer.json()["detail"], answer.json()


def test_a_dataset_name_that_displays_otherwise_is_refused(client: TestClient, team_key: str) -> None:
    for char in ("\u202e", "\u200b", "\u2069"):
        answer = push(client, team_key, rte_files(), name=f"tiny{char}rte", expect=422).json()
        assert answer["field"] == "name" and f"U+{ord(char):04X}" in answer["detail"], answer
    assert push(client, team_key, rte_files(), name=" tiny-rte ").json()["name"] == "tiny-rte"  # trimmed


# --- the document states the rules ----------------------------------------------------------------------


def _upload_fields(app: FastAPI) -> dict[str, Any]:
    body = app.openapi()["paths"]["/api/v1/datasets"]["post"]["requestBody"]
    return dict(body["content"]["multipart/form-data"]["schema"]["properties"])


def test_the_document_states_the_upload_fields_rules(app: FastAPI) -> None:
    upload = _upload_fields(app)
    for name in ("name", "task"):
        assert upload[name]["type"] == "string" and upload[name]["minLength"] == 1, upload[name]
        assert re.search(upload[name]["pattern"], " ") is None  # blank: the server says "missing"/unknown
    task = app.openapi()["components"]["schemas"]["JobSpec"]["properties"]["task"]
    assert {"type": "string", "minLength": 1} in task["anyOf"]
    assert {"type": "array", "items": {"type": "string"}, "minItems": 1} in task["anyOf"]


@pytest.mark.parametrize(
    "name",
    ["tiny-rte", " tiny-rte\t", "a", "A.b_c-9", "x" * 100, "x" * 101, "", " ", "-a", ".a", "a/b", "../etc",
     "sha256", " sha256 ", "sha2567", "tiny\u202erte", "tiny rte", "é"],
)  # fmt: skip
def test_a_name_is_valid_by_the_document_exactly_when_the_server_takes_it(app: FastAPI, name: str) -> None:
    """The document's pattern for the upload's `name` and the server's check agree, both ways."""
    rule = _upload_fields(app)["name"]
    by_document = (
        len(name) >= rule["minLength"]
        and re.search(rule["pattern"], name) is not None
        and re.search(rule["not"]["pattern"], name) is None
    )
    try:
        fields(Form(fields={"name": name, "task": "rte"}))
    except ApiError as err:
        assert err.field == "name"
        by_server = False
    else:
        by_server = True
    assert by_document == by_server, (name, by_document, by_server)


# --- other text a tenant sets that others read: an API key's name, a dataset's description, a webhook's URL --


@pytest.mark.parametrize("char", HIDDEN, ids=[f"U+{ord(c):04X}" for c in HIDDEN])
def test_an_api_key_name_that_displays_otherwise_is_refused(
    client: TestClient, admin_key: str, char: str
) -> None:
    client.post("/api/v1/teams", json={"name": "nlp"}, headers=auth(admin_key))
    answer = client.post(
        "/api/v1/teams/nlp/keys", json={"name": f"ci{char}enilepip"}, headers=auth(admin_key)
    )
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert (
        body["field"] == "name" and f"U+{ord(char):04X}" in body["detail"] and char not in body["detail"]
    ), body
    assert client.get("/api/v1/teams/nlp/keys", headers=auth(admin_key)).json()["count"] == 0
    fine = client.post("/api/v1/teams/nlp/keys", json={"name": "ci pipeline é"}, headers=auth(admin_key))
    assert fine.status_code == 201 and fine.json()["name"] == "ci pipeline é"


@pytest.mark.parametrize("char", HIDDEN, ids=[f"U+{ord(c):04X}" for c in HIDDEN])
def test_a_dataset_description_that_displays_otherwise_is_refused(
    client: TestClient, team_key: str, char: str
) -> None:
    answer = push(client, team_key, rte_files(), description=f"labels\u0020are{char}fine", expect=422).json()
    assert answer["field"] == "description" and f"U+{ord(char):04X}" in answer["detail"], answer
    assert "a description must display as it is stored" in answer["detail"] and char not in answer["detail"]
    assert client.get("/api/v1/datasets", headers=auth(team_key)).json()["count"] == 0
    kept = push(client, team_key, rte_files(), description="  RTE, relabelled — v2  ").json()
    assert kept["description"] == "RTE, relabelled — v2"


def test_the_document_states_the_rule_for_each_such_field(app: FastAPI) -> None:
    document = app.openapi()
    schemas = document["components"]["schemas"]
    key_name = schemas["ApiKeyCreate"]["properties"]["name"]
    job_name = schemas["JobSpec"]["properties"]["name"]
    webhook_url = schemas["WebhookCreate"]["properties"]["url"]
    description = _upload_fields(app)["description"]
    for rule in (key_name, job_name, webhook_url, description):
        string = next(
            b for b in rule.get("anyOf", [rule]) if b["type"] == "string"
        )  # an optional one: in anyOf
        assert string["not"] == {"pattern": HIDDEN_PATTERN}, rule
        assert "Cc, Cf, Cs, Zl, Zp" in rule["description"]
    assert {"type": "null"} in key_name["anyOf"] and {"type": "null"} in job_name["anyOf"]  # null stays valid


@pytest.mark.usefixtures(
    "receiver"
)  # the URL's host resolves to a global address: only the character is wrong
@pytest.mark.parametrize(
    "char", ["\u202e", "\u200b", "\u2066", "\ufeff"], ids=["U+202E", "U+200B", "U+2066", "U+FEFF"]
)
def test_a_webhook_url_that_displays_otherwise_is_refused(
    client: TestClient, team_key: str, char: str
) -> None:
    answer = client.post("/api/v1/webhooks", json={"url": f"https://ci.example.com/hooks/{char}exe.txt"},
                         headers=auth(team_key))  # fmt: skip
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["field"] == "url" and f"U+{ord(char):04X}" in body["detail"] and char not in body["detail"], (
        body
    )
    assert "a URL must display as it is stored" in body["detail"]
    assert client.get("/api/v1/webhooks", headers=auth(team_key)).json()["count"] == 0
