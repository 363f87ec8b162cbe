"""Admission against a real `smartune serve` (issue 32): a submission before the pool was ever read is
judged by the largest node the deployment declares; a retry and an audit pass the same admission as a
submission (the priority cap, lowered on the timeline; the device-hour budget).

One server and one Ray head of its own: the server starts first, pointed at the head's dashboard port
where nothing listens yet, so "before the first read of the pool" is a state the test holds, not a race.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from service.engine.ray_jobs import JobSubmissionAdapter
from tests.integration.client import FINAL, ONE_TRIAL, Api, tiny_spec
from tests.support.cluster import (
    RAY_PORT_FLAGS,
    VENV_BIN,
    base_env,
    free_port,
    make_server,
    start_ray_head,
    wait_for,
)

LOWERED = "priority lowered from 5 to 0, the team's maximum"


def _stop_behind_its_back(adapter: JobSubmissionAdapter, submission_id: str) -> None:
    """Stop the job's Ray job outside smartune (a failure to it) once Ray knows the submission."""
    wait_for(lambda: adapter.stop(submission_id), 120, f"Ray to stop {submission_id}", interval=0.5)


def _capacity(api: Api) -> Any:
    return api("GET", "/api/v1/pool").json()["capacity"]


def test_admission_before_the_pool_is_read_and_for_retries_and_audits(tmp_path: Path, glue_dir: Path) -> None:
    ports = {flag: free_port() for flag in RAY_PORT_FLAGS}
    address = f"http://127.0.0.1:{ports['--dashboard-port']}"
    # The server reads this machine's Ray token when it starts: make sure there is one before the head.
    subprocess.run([str(VENV_BIN / "ray"), "get-auth-token", "--generate"], env=base_env(), check=True,
                   capture_output=True)  # fmt: skip
    server = make_server(
        tmp_path, ray_address=address, SMARTUNE_LARGEST_NODE_CPUS="4", SMARTUNE_LARGEST_NODE_GPUS="0"
    ).start()
    head = None
    try:
        admin = Api(server, server.admin_key())
        api = Api(server, admin.team_key("bravo", max_priority=5, cpu_quota=512))

        # Finding 4: no Ray yet. A trial larger than the declared node waits for the pool (503), one that
        # fits it is queued.
        waiting = api("POST", "/api/v1/jobs", expect=503, json=tiny_spec(resources={"cpus": 256, "gpus": 0}))
        assert waiting.json()["field"] == "resources.cpus" and waiting.headers["Retry-After"] == "1"
        assert _capacity(api) is None
        done = api.submit(tiny_spec(priority=5, search_space=ONE_TRIAL))
        long = {**tiny_spec()["training"], "epochs": 20, "max_train_samples": 64}
        one_trial = {"axes": {"learning_rate": {"type": "grid", "values": [5e-4]}}}
        failed = api.submit(tiny_spec(priority=5, training=long, search_space=one_trial, seeds=[2]))

        head = start_ray_head(ports=ports)  # 4 CPUs
        wait_for(lambda: bool((c := _capacity(api)) and c["cpus"] == 4.0), 120, "the engine to read the pool")
        refused = api("POST", "/api/v1/jobs", expect=422, json=tiny_spec(resources={"cpus": 256, "gpus": 0}))
        assert "exceed the pool of 4" in refused.json()["detail"]
        _stop_behind_its_back(JobSubmissionAdapter(address), f"{failed}-a1")
        assert api.wait(failed, lambda j: j["state"] in FINAL, past_the_end=True)["state"] == "FAILED"
        job = api.wait(done, lambda j: j["state"] in FINAL)
        assert job["state"] == "SUCCEEDED", job["message"]

        # Finding 3: the admin lowers the team's maximum priority; a retry and an audit are lowered to it.
        admin("PATCH", "/api/v1/teams/bravo", json={"max_priority": 0})
        above = api("POST", "/api/v1/jobs", expect=422, json=tiny_spec(priority=5, seeds=[3]))
        assert above.json()["field"] == "priority"
        assert api("POST", f"/api/v1/jobs/{failed}/retry").json()["priority"] == 0
        assert (
            f", {LOWERED}, after: Job was intentionally stopped"
            in api.job(failed)["transitions"][-1]["reason"]
        )
        api("POST", f"/api/v1/jobs/{failed}/cancel")
        audit = api("POST", f"/api/v1/jobs/{done}/audits", expect=201, json={}).json()
        assert audit["priority"] == 0
        assert api.job(audit["id"])["transitions"][0]["reason"] == f"audit of {done} submitted; {LOWERED}"
        api("POST", f"/api/v1/jobs/{audit['id']}/cancel")

        # Finding 2: the team's budget is spent: a submission and an audit are both refused with the numbers.
        admin("PATCH", "/api/v1/teams/bravo", json={"cpu_hours_budget": 0.000001})
        submission = api("POST", "/api/v1/jobs", expect=409, json=tiny_spec(seeds=[4]))
        refusal = api("POST", f"/api/v1/jobs/{done}/audits", expect=409, json={}).json()
        for numbers in (submission.json()["budget"], refusal["budget"]):
            assert numbers["fits"] is False and numbers["estimate"] > 0 and numbers["used"] > 0
        assert [a["id"] for a in api("GET", f"/api/v1/jobs/{done}/audits").json()["data"]] == [audit["id"]]
        assert api.job(audit["id"])["state"] == "CANCELLED"
        jobs = api("GET", "/api/v1/jobs").json()["data"]  # the refused requests created nothing
        assert {j["state"] for j in jobs} == {"SUCCEEDED", "CANCELLED"}, jobs
    finally:
        server.stop()
        if head is not None:
            head.stop()
