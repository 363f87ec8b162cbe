"""A Ray head whose own autoscaler adds and removes worker nodes on this machine: Ray's fake multi-node
node provider (`provider.type: fake_multinode`), the setup of `ray.cluster_utils.AutoscalingCluster`.

Not that class itself, which cannot run here: its config template
(`ray/autoscaler/_private/fake_multi_node/example.yaml`) is not in the Ray 2.60 wheel, so its constructor
raises FileNotFoundError; its `start()` and `shutdown()` run `ray stop --force`, which would kill every Ray
process on the machine (the session's shared head, other tests' clusters); and it starts the head on Ray's
fixed ports without token auth. So the same config is written here (the template's keys, read from Ray's
repository) and the head is started as every other head of the tests is (tests/support/cluster.py: free
ports, token auth, its own short temp folder, stopped by its own process group) with
`--autoscaling-config` and the two variables `AutoscalingCluster.start` sets (`RAY_FAKE_CLUSTER=1`,
`AUTOSCALER_UPDATE_INTERVAL_S=1`). `provider.gcs_address` points the nodes the autoscaler starts at this
head's GCS port (they would look for 6379). Those nodes are raylets started by the autoscaler's monitor
process; whatever of them outlives the head is found by the head's temp folder and killed by pid.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.engine.ray_jobs import JobSubmissionAdapter
from tests.support.cluster import RayHead, ray_ports, start_ray_head

HEAD_TYPE = "ray.head.default"


def fake_cluster_config(
    gcs_address: str, worker_types: dict[str, dict[str, Any]], *, idle_timeout_s: float
) -> dict[str, Any]:
    """The autoscaler's cluster config: a head offering nothing and `worker_types` ({name: {"resources":
    {"CPU": 2, "GPU": 1}, "min_workers": 0, "max_workers": 1}}), idle nodes removed after `idle_timeout_s`."""
    types = {name: {"node_config": {}, **spec} for name, spec in worker_types.items()}
    return {
        "cluster_name": "smartune-fake",
        "max_workers": sum(int(spec["max_workers"]) for spec in worker_types.values()),
        "provider": {
            "type": "fake_multinode",
            "use_node_id_as_ip": True,
            "disable_node_updaters": True,
            "disable_launch_config_check": True,
            "gcs_address": gcs_address,
        },  # fmt: skip
        "available_node_types": {
            HEAD_TYPE: {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
            **types,
        },  # fmt: skip
        "head_node_type": HEAD_TYPE,
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": idle_timeout_s / 60,
        "auth": {},
        "docker": {},
        "initialization_commands": [],
        "setup_commands": [],
        "head_setup_commands": [],
        "worker_setup_commands": [],
        "head_start_ray_commands": [],
        "worker_start_ray_commands": [],
        "file_mounts": {},
        "cluster_synced_files": [],
        "file_mounts_sync_continuously": False,
        "rsync_exclude": [],
        "rsync_filter": [],
    }


@dataclass
class AutoscalingHead:
    head: RayHead
    config: Path

    @property
    def address(self) -> str:
        return self.head.address

    def gpu_nodes(self) -> list[dict[str, Any]]:
        """The live nodes offering GPUs (the head offers none): the ones the autoscaler added."""
        nodes = JobSubmissionAdapter(self.address).nodes()
        return [n for n in nodes if n["resources_total"].get("GPU")]

    def logs(self) -> str:
        """The tails of the head's output, its dashboard's and its autoscaler's logs (for a failed test)."""
        folder = self.head.log.parent
        logs = [self.head.log, *sorted(folder.glob("ray/session_latest/logs/dashboard.log")),
                *sorted(folder.glob("ray/session_latest/logs/monitor.log"))]  # fmt: skip
        return "\n".join(
            f"== {log}\n{log.read_text(errors='replace')[-3000:]}" for log in logs if log.is_file()
        )

    def stop(self) -> None:
        folder = str(self.head.log.parent)  # unique to this head: every process of its cluster names it
        self.head.stop()
        for pid in _pids_naming(folder):  # an autoscaled node left behind (its raylet, its workers)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.config.unlink(missing_ok=True)


def _pids_naming(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def start_autoscaling_head(
    worker_types: dict[str, dict[str, Any]], *, idle_timeout_s: float = 6.0, env: dict[str, str] | None = None
) -> AutoscalingHead:
    """A head with no CPUs and no GPUs (KubeRay's `num-cpus: "0"`) whose autoscaler starts `worker_types`
    nodes on demand, with the dashboard (the Jobs API) on a free port."""
    from ray._private.services import get_node_ip_address  # where the head's GCS listens

    ports = ray_ports()
    config = fake_cluster_config(
        f"{get_node_ip_address()}:{ports['--port']}", worker_types, idle_timeout_s=idle_timeout_s
    )
    handle, name = tempfile.mkstemp(prefix="st-autoscaling-", suffix=".json")
    with os.fdopen(handle, "w") as out:
        json.dump(config, out)
    fake = {"RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1"}
    try:
        head = start_ray_head(num_cpus=0, num_gpus=0, ports=ports, env={**(env or {}), **fake},
                              args=[f"--autoscaling-config={name}"])  # fmt: skip
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return AutoscalingHead(head, Path(name))
