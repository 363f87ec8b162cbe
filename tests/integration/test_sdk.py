"""The SDK and the CLI's `--json` against a real `smartune serve` on a real Ray head: a tiny sweep (two
learning rates, tiny-random BERT, 32 RTE examples) submitted, waited for and read back as a DataFrame."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import smartune
from smartune.frames import TRIAL_COLUMNS
from tests.integration.client import Api, tiny_spec
from tests.support.cluster import Server

ROOT = Path(__file__).resolve().parents[2]


def cli(server: Server, key: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """`python -m cli ARGV` with the server and key in its environment (never in its arguments)."""
    env = {**os.environ, "SMARTUNE_URL": server.url, "SMARTUNE_API_KEY": key}
    env.pop("SMARTUNE_API_KEY_FILE", None)
    return subprocess.run(
        [sys.executable, "-m", "cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )


def as_json(server: Server, key: str, *argv: str) -> Any:
    done = cli(server, key, *argv, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_submit_wait_and_the_trials_frame(server: Server, tmp_path: Path) -> None:
    admin_key = server.admin_key()
    key = Api(server, admin_key).team_key("nlp")
    spec_file = tmp_path / "tiny.json"
    spec_file.write_text(json.dumps(tiny_spec(name="sdk")))
    polled: list[str] = []
    with smartune.Client(server.url, key) as client:
        job_id = client.submit(spec_file, idempotency_key="sdk-once")
        assert client.submit(spec_file, idempotency_key="sdk-once") == job_id
        job = client.wait(job_id, timeout=300, poll_s=1, progress=lambda j: polled.append(j["state"]))
        assert job["state"] == "SUCCEEDED", job["message"]
        order = ["QUEUED", "DISPATCHED", "RUNNING", "SUCCEEDED"]
        assert polled == sorted(polled, key=order.index) and polled[-1] == "SUCCEEDED"  # one call a poll
        frame = client.trials_frame(job_id)
        results = client.results(job_id)
        assert client.logs(job_id, tail=1).startswith("{")  # the driver's summary line
        assert [j["id"] for j in client.jobs(state="succeeded")] == [job_id]

    trials = job["trials"]
    params = {name for t in trials for name in t["params"]}
    metrics = {name for t in trials for name in t["metrics"]}
    assert params == {"learning_rate", "seed"} and "score" in metrics  # its cell, and its seed
    assert len(trials) == 2 and frame.shape == (len(trials), len(params) + len(TRIAL_COLUMNS) + len(metrics))
    assert sorted(frame["learning_rate"]) == [1e-4, 5e-4]
    assert set(frame["state"]) == {"TERMINATED"} and frame["best_score"].notna().all()
    assert frame["best_score"].max() == job["best_value"] == results["best"]["value"]
    assert set(frame["mlflow_run_id"]) == {t["mlflow_run_id"] for t in trials}

    # the CLI: every data command prints one JSON document
    assert as_json(server, key, "status", job_id)["state"] == "SUCCEEDED"
    assert as_json(server, key, "jobs")["data"][0]["id"] == job_id
    assert as_json(server, key, "results", job_id)["best"] == results["best"]
    assert as_json(server, key, "pool")["capacity"] == {"cpus": 4.0, "gpus": 2.0}
    assert as_json(server, key, "queue") == []
    assert as_json(server, key, "submit", str(spec_file), "--idempotency-key", "sdk-once")["id"] == job_id
    assert [t["name"] for t in as_json(server, admin_key, "teams")] == ["nlp"]
    assert len(as_json(server, admin_key, "keys", "nlp")) == 1
    human = cli(server, key, "status", job_id)
    assert human.returncode == 0 and f"{job_id} SUCCEEDED" in human.stdout

    completion = cli(server, key, "completion", "bash")
    assert completion.returncode == 0 and "submit" in completion.stdout
