"""Hostile inputs against a real `smartune serve` (issue 32): rows built to crash the dataset checker (its
real child interpreter) are a 422 naming the file and line; names with a right-to-left override are a 422
naming the field, for a job, a team and a dataset.

One server for the module, and no Ray head: every request here is answered before anything reaches Ray,
so the server is pointed at a port where nothing listens (the unit tier covers the same through
tests/service/test_hostile_inputs.py, with the checker in-process).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.integration.client import Api, tiny_spec
from tests.service.dataset_utils import rte_files
from tests.support.cluster import Server, free_port, make_server

DEEP_ROW = '{"sentence1": ' + "[" * 100_000 + "]" * 100_000 + ', "sentence2": "b", "label": "entailment"}\n'
HUGE_STSB = '{"sentence1":"a","sentence2":"b","label":' + "9" * 400 + "}\n"
RLO = "\u202e"  # right-to-left override


@pytest.fixture(scope="module")
def hostile_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = make_server(tmp_path_factory.mktemp("hostile"), ray_address=f"http://127.0.0.1:{free_port()}")
    yield server.start()
    server.stop()


@pytest.fixture(scope="module")
def keys(hostile_server: Server) -> tuple[Api, Api]:
    admin = Api(hostile_server, hostile_server.admin_key())
    return admin, Api(hostile_server, admin.team_key("nlp", cpu_quota=2))


def _upload(api: Api, name: str, task: str, files: dict[str, bytes]) -> httpx.Response:
    parts = [("files", (file_name, data)) for file_name, data in files.items()]
    response: httpx.Response = api(
        "POST", "/api/v1/datasets", expect=None, data={"name": name, "task": task}, files=parts
    )
    return response


@pytest.mark.parametrize(
    ("task", "files"),
    [
        ("rte", {"train.jsonl": DEEP_ROW, "dev.jsonl": '{"sentence1":"a","sentence2":"b","label":"entailment"}\n'}),
        ("stsb", {"train.jsonl": HUGE_STSB, "dev.jsonl": '{"sentence1":"a","sentence2":"b","label":2.5}\n'}),
    ],
    ids=["nested-100000-deep", "label-of-400-digits"],
)  # fmt: skip
def test_rows_built_to_crash_the_checker_are_a_422_naming_file_and_line(
    keys: tuple[Api, Api], task: str, files: dict[str, str]
) -> None:
    answer = _upload(keys[1], f"hostile-{task}", task, {k: v.encode() for k, v in files.items()})
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert (body["field"], body["file"], body["line"]) == ("files", "train.jsonl", 1), body


def test_names_with_a_right_to_left_override_are_refused(
    keys: tuple[Api, Api], hostile_server: Server
) -> None:
    admin, team = keys
    refused = [
        team("POST", "/api/v1/jobs", expect=None, json=tiny_spec(name=f"run{RLO}gpj.exe")),
        admin("POST", "/api/v1/teams", expect=None, json={"name": f"nlp{RLO}x", "cpu_quota": 1}),
        _upload(team, f"tiny{RLO}rte", "rte", rte_files()),
    ]
    for answer in refused:
        assert answer.status_code == 422, answer.text
        assert answer.json()["field"] == "name" and "U+202E" in answer.json()["detail"], answer.json()
    assert team("GET", "/api/v1/jobs").json()["count"] == 0
    assert team("GET", "/api/v1/datasets").json()["count"] == 0
    assert "unhandled error on" not in hostile_server.output()  # no request reached the 500 handler
