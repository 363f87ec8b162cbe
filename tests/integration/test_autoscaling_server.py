"""Scaling from zero GPU nodes with Ray's own autoscaler (issue 30), against a real `smartune serve`.

The cluster is KubeRay's shape on one machine (tests/support/autoscaling.py: Ray's fake multi-node provider,
as `ray.cluster_utils.AutoscalingCluster` sets it up): a head that offers no CPUs and no GPUs, and one node
type of 2 CPUs and 2 logical GPUs, none running at first, at most one, removed after 6 s idle. The server
runs with `SMARTUNE_AUTOSCALER=1` and that node type declared, as deploy/k8s does. A GPU job submitted over
HTTP is admitted and dispatched on a pool of zero, its timeline says it waits for the autoscaler, Ray's
autoscaler starts the node for its trial, the job succeeds and the idle node goes away; the pool is read
again as zero afterwards (a dead node no longer breaks the read). Then, from zero again, two teams with a
quota of 1 GPU each: team alpha's second job waits with the quota as its reason while bravo's runs (and is
then cancelled: running it after alpha's first would only add a minute).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.integration.client import FINAL, Api, tiny_spec
from tests.support.autoscaling import AutoscalingHead, start_autoscaling_head
from tests.support.cluster import make_server, wait_for

WORKER_TYPES = {"gpu": {"resources": {"CPU": 2, "GPU": 2}, "min_workers": 0, "max_workers": 1}}
NODE_TYPES = '[{"cpus": 2, "gpus": 2, "max_workers": 1}]'  # the same, as the deployment declares it
WAITS = "waiting for the autoscaler to add a node with 1 GPU, 1 CPU (a node of type 2 GPUs, 2 CPUs)"
QUOTA = "team quota: 1/1 GPUs in use, needs 1 GPU at its peak"


def gpu_job(seed: int) -> dict[str, Any]:
    """One trial of the tiny model on one (logical) GPU."""
    one = {"axes": {"learning_rate": {"type": "grid", "values": [5e-4]}}}
    return tiny_spec(resources={"cpus": 1, "gpus": 1}, search_space=one, seeds=[seed])


def _capacity(api: Api) -> Any:
    return api("GET", "/api/v1/pool").json()["capacity"]


def _succeeds(api: Api, job_id: str, head: AutoscalingHead, seen: list[int]) -> dict[str, Any]:
    """Wait for the job's end, noting how many GPU nodes were up at each look."""

    def ended(job: dict[str, Any]) -> bool:
        seen.append(len(head.gpu_nodes()))
        return job["state"] in FINAL

    job = api.wait(job_id, ended, timeout=240)
    assert job["state"] == "SUCCEEDED", job["message"]
    return job


def test_jobs_scale_the_gpu_nodes_up_from_zero_and_idle_nodes_go_away(
    tmp_path: Path, glue_dir: Path, mlflow_uri: str
) -> None:
    head = start_autoscaling_head(WORKER_TYPES)
    server = None
    try:  # a migrated MLflow store: its first migration took 24 s of the engine's first round under load
        server = make_server(tmp_path, ray_address=head.address, MLFLOW_TRACKING_URI=mlflow_uri,
                             SMARTUNE_AUTOSCALER="1", SMARTUNE_AUTOSCALER_NODE_TYPES=NODE_TYPES).start()  # fmt: skip
        admin = Api(server, server.admin_key())
        alpha = Api(server, admin.team_key("alpha", gpu_quota=1))
        bravo = Api(server, admin.team_key("bravo", gpu_quota=1))
        wait_for(lambda: _capacity(alpha) == {"cpus": 0.0, "gpus": 0.0}, 60, "the engine to read a pool of 0")
        assert head.gpu_nodes() == []

        # One GPU job on a pool of zero: admitted, dispatched, and the autoscaler adds the node.
        seen: list[int] = []
        first = _succeeds(alpha, alpha.submit(gpu_job(1)), head, seen)
        dispatched = next(t for t in first["transitions"] if t["to_state"] == "DISPATCHED")
        assert dispatched["reason"].endswith(f"{WAITS}; the live pool has 0 GPUs, 0 CPUs free"), dispatched
        assert max(seen) == 1, seen  # its trial ran on the node the autoscaler added (the head has no GPU)
        assert f"job {first['id']}: {WAITS}" in server.output()  # the engine's log says it too
        wait_for(lambda: head.gpu_nodes() == [], 90, "the idle GPU node to be removed", interval=1)
        wait_for(lambda: _capacity(alpha) == {"cpus": 0.0, "gpus": 0.0}, 30, "the pool read as 0 again")

        # From zero again, two teams of 1 GPU each: alpha's second job waits for its quota, bravo's runs.
        a2, a3 = alpha.submit(gpu_job(2)), alpha.submit(gpu_job(3))
        b1 = bravo.submit(gpu_job(1))
        alpha.wait(a3, lambda j: j["wait_reason"] == QUOTA, timeout=30)
        bravo.wait(b1, lambda j: j["state"] == "RUNNING", timeout=60)
        assert (alpha.job(a3)["state"], alpha.job(a3)["wait_reason"]) == ("QUEUED", QUOTA)  # while b1 runs
        wait_for(lambda: _capacity(bravo)["gpus"] == 2.0, 120, "the pool to read the added node", interval=1)
        alpha("POST", f"/api/v1/jobs/{a3}/cancel")  # its turn would come once a2 ends: not needed here
        seen.clear()
        _succeeds(bravo, b1, head, seen)
        _succeeds(alpha, a2, head, seen)
        assert max(seen) == 1, seen  # one node of 2 GPUs held both teams' trials
    except BaseException:
        print(head.logs())  # noqa: T201 - shown by pytest with the failure
        raise
    finally:
        if server is not None:
            server.stop()
        head.stop()
