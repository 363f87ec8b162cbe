"""Uploaded datasets over REST: validation by training's loader, content addressing, versions, visibility,
the size limit, publishing, deleting, and a job spec pinned to a dataset's digest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.config import Settings
from tests.service.dataset_utils import expected_digest, push, rte_files, rte_tsv
from tests.service.utils import auth, spec


def store_root(settings: Settings) -> Path:
    return Path(settings.dataset_store_uri)


def test_an_upload_is_validated_counted_and_stored_by_content(
    client: TestClient, team_key: str, settings: Settings
) -> None:
    files = rte_files()
    body = push(client, team_key, files, description="eight pairs").json()
    digest = expected_digest(files)
    assert body["digest"] == digest and body["ref"] == f"dataset:sha256:{digest}"
    assert (body["name"], body["version"], body["task"], body["team"]) == ("tiny-rte", 1, "rte", "nlp")
    assert body["rows"] == {"train": 8, "dev": 4} and body["created"] is True
    assert body["size_bytes"] == sum(len(d) for d in files.values())
    assert [f["name"] for f in body["files"]] == ["dev.tsv", "train.tsv"]
    objects = store_root(settings) / "sha256" / digest
    assert (objects / "files" / "train.tsv").read_bytes() == files["train.tsv"]
    manifest = (objects / "manifest").read_text()
    assert manifest.splitlines()[0].endswith("  dev.tsv") and len(manifest.splitlines()) == 2
    assert not list((settings.data_dir / "uploads").iterdir())  # the scratch folder is cleaned up


def test_same_content_returns_the_version_and_new_content_adds_one(client: TestClient, team_key: str) -> None:
    first = push(client, team_key, rte_files()).json()
    again = push(client, team_key, {"dev.tsv": rte_files()["dev.tsv"], "train.tsv": rte_files()["train.tsv"]},
                 expect=200).json()  # fmt: skip
    assert (again["version"], again["created"], again["digest"]) == (1, False, first["digest"])
    second = push(client, team_key, rte_files(offset=1)).json()
    assert second["version"] == 2 and second["digest"] != first["digest"]
    versions = client.get("/api/v1/datasets/tiny-rte", headers=auth(team_key)).json()
    assert [v["version"] for v in versions["data"]] == [1, 2] and versions["team"] == "nlp"
    one = client.get("/api/v1/datasets/tiny-rte/1", headers=auth(team_key)).json()
    assert one["digest"] == first["digest"] and one["rows"] == {"train": 8, "dev": 4}
    listed = client.get("/api/v1/datasets", headers=auth(team_key)).json()
    assert listed["count"] == 1 and listed["data"][0]["version"] == 2 and listed["data"][0]["versions"] == 2


def test_a_bad_row_is_named_by_file_line_and_column_and_nothing_is_stored(
    client: TestClient, team_key: str, settings: Settings
) -> None:
    bad = rte_tsv(4) + b"4\tA dog.\tA cat.\tmaybe\n"
    answer = push(client, team_key, {"train.tsv": rte_tsv(8), "dev.tsv": bad}, expect=422).json()
    assert answer["field"] == "files" and (answer["file"], answer["line"]) == ("dev.tsv", 6)
    assert answer["column"] == "'label'" and "dev.tsv line 6, column 'label'" in answer["detail"]
    assert "maybe" not in answer["detail"]  # no cell is quoted
    short = push(
        client, team_key, {"train.tsv": b"index\tsentence1\n0\tx\n", "dev.tsv": rte_tsv()}, expect=422
    )
    assert short.json()["file"] == "train.tsv" and short.json()["line"] == 1
    assert client.get("/api/v1/datasets", headers=auth(team_key)).json()["count"] == 0
    assert not (store_root(settings) / "sha256").exists()


@pytest.mark.usefixtures("starts_processes")  # the unit tier runs the check in-process (fixtures.py)
def test_the_rows_are_read_by_a_child_interpreter(client: TestClient, team_key: str) -> None:
    """The real `python -m worker.training.dataset_check` child, confined to the upload: its count and its
    refusal cross the process boundary as one JSON line."""
    assert push(client, team_key, rte_files()).json()["rows"] == {"train": 8, "dev": 4}
    bad = rte_tsv(4) + b"4\tA dog.\tA cat.\tmaybe\n"
    answer = push(client, team_key, {"train.tsv": rte_tsv(8), "dev.tsv": bad}, name="bad", expect=422).json()
    assert (answer["file"], answer["line"], answer["column"]) == ("dev.tsv", 6, "'label'")


@pytest.mark.parametrize(
    ("change", "field", "needle"),
    [
        ({"name": ""}, "name", "missing"),
        ({"name": "../etc"}, "name", "letters"),
        ({"task": "nope"}, "task", "unknown task"),
        ({"description": "x" * 2001}, "description", "longer"),
        ({"files": {"test.tsv": b"x"}}, "files", "no split"),
        ({"files": {"train.tsv": rte_tsv(8)}}, "files", "no data for split 'dev'"),
        ({"files": {"train.tsv": rte_tsv(8), "dev.tsv": rte_tsv(), "dev.csv": b"a"}}, "files", "both split"),
        ({"colour": "red"}, "colour", "unknown field"),
    ],
)
def test_every_bad_field_is_a_422_naming_it(
    client: TestClient, team_key: str, change: dict[str, object], field: str, needle: str
) -> None:
    change = dict(change)  # the parameter is shared: the PostgreSQL rerun (test_api_postgres) sees it again
    files = change.pop("files", rte_files())
    fields = {"name": "tiny-rte", "task": "rte", **change}
    name, task = str(fields.pop("name")), str(fields.pop("task"))
    answer = push(
        client, team_key, files, name=name, task=task, expect=422, **{k: str(v) for k, v in fields.items()}
    )  # type: ignore[arg-type]
    assert answer.json()["field"] == field and needle in answer.json()["detail"], answer.json()


def test_bodies_that_are_not_an_upload_are_4xx_never_500(client: TestClient, team_key: str) -> None:
    url, headers = "/api/v1/datasets", auth(team_key)
    assert client.post(url, headers=headers, json={"name": "x"}).status_code == 415
    garbage = {**headers, "content-type": "multipart/form-data; boundary=XyZ"}
    assert client.post(url, headers=garbage, content=b"not multipart at all").status_code == 400
    truncated = b'--XyZ\r\nContent-Disposition: form-data; name="name"\r\n\r\nabc'
    assert client.post(url, headers=garbage, content=truncated).status_code == 400
    assert client.post(url, headers=garbage, content=b"").status_code == 422
    fields_only = b'--XyZ\r\nContent-Disposition: form-data; name="name"\r\n\r\nabc\r\n--XyZ--\r\n'
    no_file = client.post(url, headers=garbage, content=fields_only).json()
    assert no_file["field"] == "task" or no_file["field"] == "files", no_file
    weird_name = b'--XyZ\r\nContent-Disposition: form-data; name="files"; filename="../x.tsv"\r\n\r\nabc\r\n--XyZ--\r\n'
    assert client.post(url, headers=garbage, content=weird_name).json()["field"] == "files"
    assert client.get("/api/v1/datasets/x/0", headers=headers).status_code == 422  # path.version >= 1
    admin_upload = push(client, "smt_nope_nope", rte_files(), expect=401)
    assert admin_upload.status_code == 401


def test_the_size_limit_is_a_413_naming_it(client: TestClient, team_key: str, settings: Settings) -> None:
    settings.dataset_max_bytes = 4096
    answer = push(client, team_key, {"train.tsv": rte_tsv(200), "dev.tsv": rte_tsv()}, expect=413).json()
    assert answer["limit_bytes"] == 4096 and "4096 bytes" in answer["detail"] and answer["field"] == "files"
    chunked = client.post(  # no Content-Length: the stream is cut at the limit
        "/api/v1/datasets",
        headers={**auth(team_key), "content-type": "multipart/form-data; boundary=b"},
        content=iter([b"x" * 3000, b"x" * 3000]),
    )
    assert chunked.status_code == 413 and chunked.json()["limit_bytes"] == 4096
    settings.dataset_max_bytes = 256 * 1024  # above the app's general body limit (64 KiB in these tests)
    push(client, team_key, {"train.tsv": rte_tsv(1500), "dev.tsv": rte_tsv()})


def test_teams_see_their_own_and_published_datasets_only(
    client: TestClient, team_key: str, other_key: str, admin_key: str
) -> None:
    push(client, team_key, rte_files())
    assert client.get("/api/v1/datasets", headers=auth(other_key)).json()["count"] == 0
    hidden = client.get("/api/v1/datasets/tiny-rte", headers=auth(other_key))
    assert hidden.status_code == 404 and hidden.json()["detail"] == "dataset 'tiny-rte' not found"
    assert client.get("/api/v1/datasets/tiny-rte/1", headers=auth(other_key)).status_code == 404
    assert client.post("/api/v1/datasets/tiny-rte/1/publish", headers=auth(team_key)).status_code == 403
    published = client.post("/api/v1/datasets/tiny-rte/1/publish", headers=auth(admin_key)).json()
    assert published["published"] is True
    seen = client.get("/api/v1/datasets", headers=auth(other_key)).json()
    assert seen["count"] == 1 and seen["data"][0]["team"] == "nlp"
    assert client.get("/api/v1/datasets/tiny-rte/1", headers=auth(other_key)).status_code == 200
    push(client, team_key, rte_files(offset=1))  # version 2 is not published: others still see only 1
    assert [
        v["version"] for v in client.get("/api/v1/datasets/tiny-rte", headers=auth(other_key)).json()["data"]
    ] == [1]
    assert client.delete("/api/v1/datasets/tiny-rte/1", headers=auth(other_key)).status_code == 403
    push(client, other_key, rte_files(offset=2))  # the other team's own `tiny-rte` comes first for it
    assert client.get("/api/v1/datasets/tiny-rte", headers=auth(other_key)).json()["team"] == "vision"
    ambiguous = client.get("/api/v1/datasets/tiny-rte", headers=auth(admin_key))
    assert ambiguous.status_code == 409 and ambiguous.json()["field"] == "query.team"
    admin_view = client.get("/api/v1/datasets/tiny-rte", params={"team": "vision"}, headers=auth(admin_key))
    assert admin_view.json()["team"] == "vision"


def _spec_data(client: TestClient, key: str, job_id: str) -> str:
    return str(client.get(f"/api/v1/jobs/{job_id}", headers=auth(key)).json()["spec"]["data"])


def test_a_spec_is_pinned_to_the_digest_at_submission(
    client: TestClient, team_key: str, other_key: str, admin_key: str
) -> None:
    first = push(client, team_key, rte_files()).json()
    job = client.post("/api/v1/jobs", headers=auth(team_key), json=spec(data="dataset:tiny-rte"))
    assert job.status_code == 201, job.text
    assert _spec_data(client, team_key, job.json()["id"]) == first["ref"]
    second = push(client, team_key, rte_files(offset=1)).json()
    assert _spec_data(client, team_key, job.json()["id"]) == first["ref"]  # a later upload changes nothing
    latest = client.post("/api/v1/jobs", headers=auth(team_key), json=spec(data="dataset:tiny-rte")).json()
    pinned = client.post("/api/v1/jobs", headers=auth(team_key), json=spec(data="dataset:tiny-rte@1")).json()
    by_digest = client.post("/api/v1/jobs", headers=auth(team_key), json=spec(data=second["ref"])).json()
    assert (
        _spec_data(client, team_key, latest["id"])
        == second["ref"]
        == _spec_data(client, team_key, by_digest["id"])
    )
    assert _spec_data(client, team_key, pinned["id"]) == first["ref"]
    refusals = {
        "dataset:nope": "no such dataset",
        "dataset:tiny-rte@9": "has no version 9",
        "dataset:BAD NAME": "dataset name",
        "dataset:sha256:" + "0" * 64: "no dataset with digest",
    }
    for data, needle in refusals.items():
        answer = client.post("/api/v1/jobs", headers=auth(team_key), json=spec(data=data))
        assert answer.status_code == 422 and answer.json()["field"] == "data" and needle in answer.text, data
    foreign = client.post("/api/v1/jobs", headers=auth(other_key), json=spec(data=first["ref"]))
    assert foreign.status_code == 422 and foreign.json()["field"] == "data"  # private to team nlp
    wrong_task = client.post(
        "/api/v1/jobs", headers=auth(team_key), json=spec(data="dataset:tiny-rte", task="sst2")
    )
    assert wrong_task.status_code == 422 and "'rte' dataset" in wrong_task.json()["detail"]
    columns = client.post("/api/v1/jobs", headers=auth(team_key),
                          json=spec(data="dataset:tiny-rte", columns={"sentence1": "a"}))  # fmt: skip
    assert columns.status_code == 422 and columns.json()["field"] == "columns"
    model = client.post("/api/v1/jobs", headers=auth(team_key), json=spec(model="dataset:tiny-rte"))
    assert model.status_code == 422 and model.json()["field"] == "model"
    client.post("/api/v1/datasets/tiny-rte/1/publish", headers=auth(admin_key))
    theirs = client.post("/api/v1/jobs", headers=auth(other_key), json=spec(data="dataset:tiny-rte"))
    assert theirs.status_code == 201 and _spec_data(client, other_key, theirs.json()["id"]) == first["ref"]
    dry = client.post(
        "/api/v1/jobs", params={"dry_run": "true"}, headers=auth(team_key), json=spec(data="dataset:nope")
    )
    assert dry.status_code == 422 and dry.json()["field"] == "data"


def test_delete_waits_for_unfinished_jobs_then_removes_the_files(
    client: TestClient, team_key: str, settings: Settings
) -> None:
    made = push(client, team_key, rte_files()).json()
    job_id = client.post("/api/v1/jobs", headers=auth(team_key), json=spec(data="dataset:tiny-rte")).json()[
        "id"
    ]
    refused = client.delete("/api/v1/datasets/tiny-rte/1", headers=auth(team_key))
    assert refused.status_code == 409 and job_id in refused.json()["detail"]
    client.post(f"/api/v1/jobs/{job_id}/cancel", headers=auth(team_key))
    deleted = client.delete("/api/v1/datasets/tiny-rte/1", headers=auth(team_key))
    assert deleted.status_code == 200 and deleted.json()["digest"] == made["digest"]
    assert not (store_root(settings) / "sha256" / made["digest"]).exists()
    assert client.get("/api/v1/datasets/tiny-rte", headers=auth(team_key)).status_code == 404
    again = push(client, team_key, rte_files()).json()  # the name starts over
    assert again["version"] == 1 and json.loads(json.dumps(again))["digest"] == made["digest"]


def test_an_estimate_counts_an_uploaded_datasets_recorded_rows(client: TestClient, team_key: str) -> None:
    """The plan of a spec on an upload reads the rows its validation counted, not 'unknown' (a hub dataset's
    answer): 8 training pairs under max_train_samples 32, 4 dev pairs."""
    push(client, team_key, rte_files())
    answer = client.post(
        "/api/v1/jobs", params={"dry_run": "true"}, headers=auth(team_key), json=spec(data="dataset:tiny-rte")
    )
    assert answer.status_code == 200, answer.text
    group = answer.json()["groups"][0]
    assert (group["train_examples"], group["eval_examples"]) == (8, 4), group
    assert "uploaded dataset tiny-rte@1" in group["train_examples_basis"], group
    assert "uploaded dataset tiny-rte@1" in group["eval_examples_basis"], group
