"""A LoRA job on a tiny random Llama-style decoder through the real server: REST to SUCCEEDED on the shared
Ray head, MLflow runs with the adapter beside the merged best model, and an audit that PASSes."""

from __future__ import annotations

import json

from mlflow import MlflowClient

from tests.integration.client import FINAL, Api, tiny_spec
from tests.support.cluster import RayHead, Server
from worker.contract.tags import BEST_CHECKPOINT, MODEL_ERROR, MODEL_URI, PROVENANCE_PREFIX

LORA = {"method": "lora", "r": 4, "alpha": 8, "dropout": 0.1, "target_modules": ["q_proj", "v_proj"]}


def test_a_lora_job_on_a_tiny_llama_succeeds_and_its_audit_passes(server: Server, ray_head: RayHead) -> None:
    api = Api(server, Api(server, server.admin_key()).team_key("nlp"))
    spec = tiny_spec(model="tiny-random-llama", peft=LORA,
                     training={**tiny_spec()["training"], "padding_side": "left", "learning_rate": 5e-3},
                     search_space={"axes": {"learning_rate": {"type": "grid", "values": [5e-3]}}})  # fmt: skip
    job_id = api.submit(spec)
    job = api.wait(job_id, lambda j: j["state"] in FINAL)
    assert job["state"] == "SUCCEEDED", job["message"]
    assert job["spec"]["peft"] == LORA
    (trial,) = job["trials"]
    assert trial["state"] == "TERMINATED" and trial["best_score"] is not None and trial["mlflow_run_id"]

    tracking = MlflowClient(f"sqlite:///{server.data_dir / 'mlflow.db'}")
    run = tracking.get_run(trial["mlflow_run_id"])
    recorded = json.loads(run.data.tags[f"{PROVENANCE_PREFIX}config"])  # what the audit re-runs
    assert recorded["peft"] == LORA and recorded["padding_side"] == "left"
    assert MODEL_ERROR not in run.data.tags and run.data.tags[MODEL_URI].startswith("models:/")
    files = {f.path for f in tracking.list_artifacts(run.info.run_id, BEST_CHECKPOINT)}
    assert f"{BEST_CHECKPOINT}/model.safetensors" in files  # merged: loads as any transformers model
    adapter = {f.path for f in tracking.list_artifacts(run.info.run_id, f"{BEST_CHECKPOINT}/adapter")}
    assert f"{BEST_CHECKPOINT}/adapter/adapter_config.json" in adapter
    assert f"{BEST_CHECKPOINT}/adapter/adapter_model.safetensors" in adapter

    audit = api("POST", f"/api/v1/jobs/{job_id}/audits", expect=201, json={}).json()
    done = api.wait(audit["id"], lambda j: j["state"] in FINAL)
    assert done["state"] == "SUCCEEDED", done["message"]
    report = api("GET", f"/api/v1/jobs/{audit['id']}/results").json()
    assert report["verdict"] == "PASS", report["trials"][0]["reason"]
    assert report["trials"][0]["run_id"] == trial["mlflow_run_id"] and report["trials"][0]["exact"]
