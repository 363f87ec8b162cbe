"""Datasets on a real `smartune serve` (uvicorn, the shared local Ray head, MLflow in the data dir): a real
GLUE-style RTE folder pushed with the SDK, a tiny job that trains from it by name, the digest pinned in the
job and recorded in each trial's provenance, and an audit that re-fetches it by digest and passes."""

from __future__ import annotations

from pathlib import Path

from mlflow import MlflowClient

import smartune
from tests.integration.client import FINAL, Api, tiny_spec
from tests.support.cluster import Server


def test_a_pushed_dataset_trains_a_job_and_is_in_its_provenance(
    server: Server, glue_dir: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "RTE"
    folder.mkdir()
    for split, rows in (("train", 33), ("dev", 17)):  # the header and a few real RTE pairs
        lines = (glue_dir / "RTE" / f"{split}.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
        (folder / f"{split}.tsv").write_text("".join(lines[:rows]), encoding="utf-8")
    (folder / "test.tsv").write_text("index\tsentence1\tsentence2\n", encoding="utf-8")  # skipped by push
    admin = Api(server, server.admin_key())
    key = admin.team_key("nlp")
    with smartune.Client(url=server.url, key=key) as client:
        made = client.push_dataset(folder, "rte-small", "rte", description="33 RTE pairs")
        assert made["rows"] == {"train": 32, "dev": 16} and made["version"] == 1
        assert [d["name"] for d in client.datasets()] == ["rte-small"]
    api = Api(server, key)
    spec = tiny_spec(
        data="dataset:rte-small",
        method="vanilla",
        search_space={"axes": {"learning_rate": {"type": "grid", "values": [1e-4]}}},
    )
    job_id = api.submit(spec)
    job = api.wait(job_id, lambda j: j["state"] in FINAL)
    assert job["state"] == "SUCCEEDED", job["message"]
    assert job["spec"]["data"] == made["ref"]  # pinned at submission
    tracking = MlflowClient(f"sqlite:///{server.data_dir / 'mlflow.db'}")
    for trial in job["trials"]:
        tags = tracking.get_run(trial["mlflow_run_id"]).data.tags
        assert tags["smartune.prov.dataset_sha256"] == made["digest"]
        assert tags["smartune.prov.data_source"] == made["ref"]
        assert tags["smartune.prov.data_sha256"] != "n/a (hub dataset)"
    audit = api("POST", f"/api/v1/jobs/{job_id}/audits", expect=201, json={}).json()
    done = api.wait(audit["id"], lambda j: j["state"] in FINAL)
    assert done["state"] == "SUCCEEDED", done["message"]
    report = api("GET", f"/api/v1/jobs/{audit['id']}/results").json()
    assert report["verdict"] == "PASS", report["trials"][0]["reason"]
    drift = {row["field"]: row for row in report["trials"][0]["provenance"]}
    assert drift["dataset_sha256"]["same"] and drift["dataset_sha256"]["now"] == made["digest"]
    refused = api("DELETE", "/api/v1/datasets/rte-small/1", expect=200)  # every job has finished
    assert refused.json()["digest"] == made["digest"]
