"""The `RayJobs` protocol and its Jobs-API adapter (the local head is `service.engine.local_head`).

The control plane talks to Ray's dashboard (the Jobs REST API over httpx, the state API for the nodes'
resources) and never joins the cluster as a driver. Ray 2.60 dashboards want token auth: the token comes
from `RAY_AUTH_TOKEN` or `~/.ray/auth_token` and rides in an `Authorization` header. Tests use a fake with
the same protocol. Errors are mapped to three exceptions so callers never parse Ray's messages.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx

from service.engine.scheduler import Resources

logger = logging.getLogger(__name__)

RAY_FINAL = ("SUCCEEDED", "FAILED", "STOPPED")


class RayUnavailable(Exception):
    """The cluster cannot be reached (or refuses our credentials): try again later."""


class RayJobExists(Exception):
    """A job with this submission id exists already (so it was dispatched once: never again)."""


class RayJobError(Exception):
    """Ray refused the request for a reason that retrying will not fix."""


@dataclass(frozen=True)
class RayJobInfo:
    status: str  # PENDING / RUNNING / STOPPED / SUCCEEDED / FAILED
    message: str | None = None


class RayJobs(Protocol):
    def submit(
        self,
        *,
        submission_id: str,
        entrypoint: str,
        env_vars: dict[str, str],
        metadata: dict[str, str],
        entrypoint_cpus: float = 0.0,
        entrypoint_gpus: float = 0.0,
    ) -> None:
        """Start the job; `entrypoint_cpus`/`gpus` reserve resources for the driver process itself (a
        sweep's driver reserves none: its trials do; an audit trains in its driver)."""
        ...

    def info(self, submission_id: str) -> RayJobInfo | None:
        """The job's status, or None when Ray does not know the id (never submitted, or lost)."""
        ...

    def stop(self, submission_id: str) -> bool: ...

    def logs(self, submission_id: str) -> str | None:
        """The driver's output, or None when Ray does not know the id."""
        ...

    def capacity(self) -> Resources:
        """CPUs and GPUs of the cluster's live nodes."""
        ...

    def ping(self) -> None:
        """Raise RayUnavailable unless the dashboard answers."""
        ...


def token_path(environ: Mapping[str, str] = os.environ) -> Path:
    """Where Ray keeps the token it authenticates with (RAY_AUTH_TOKEN_PATH, else ~/.ray/auth_token)."""
    return Path(environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")


def auth_headers(token: str | None = None) -> dict[str, str]:
    token = token or os.environ.get("RAY_AUTH_TOKEN")
    path = token_path()
    if not token and path.is_file():
        token = path.read_text().strip()
    return {"Authorization": f"Bearer {token}"} if token else {}


class JobSubmissionAdapter:
    """`RayJobs` over the Ray Jobs REST API of the dashboard at `address` (http://host:8265), with httpx.

    Every call has a timeout. Ray's answers are read by status code, never by message: a connection error,
    a timeout, a 5xx or a refused credential is transient (RayUnavailable: try again later); a 404 means
    Ray does not know the submission id; any other 4xx is permanent (RayJobError), except the 400 of a
    submission id that exists already (RayJobExists).
    """

    def __init__(
        self,
        address: str,
        *,
        token: str | None = None,
        timeout_s: float = 10.0,
        transport: httpx.BaseTransport | None = None,
        empty_ok: bool = False,
    ) -> None:
        self.address = address if "://" in address else f"http://{address}"
        # With an autoscaler, live nodes that offer no CPUs (a KubeRay head with num-cpus 0, its workers
        # scaled to zero) are a pool of zero, not a pool still unread (service.engine.autoscaler).
        self.empty_ok = empty_ok
        self._headers = auth_headers(token)
        self.timeout_s = timeout_s
        self._http = httpx.Client(
            base_url=self.address, headers=self._headers, timeout=timeout_s, transport=transport
        )

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as err:  # refused, reset, timed out
            raise RayUnavailable(f"Ray dashboard at {self.address}: {type(err).__name__}: {err}") from err
        if response.status_code in (401, 403) or response.status_code >= 500:
            raise RayUnavailable(
                f"Ray dashboard at {self.address} answered {response.status_code}: {response.text[:300]}"
            )
        return response

    def submit(
        self,
        *,
        submission_id: str,
        entrypoint: str,
        env_vars: dict[str, str],
        metadata: dict[str, str],
        entrypoint_cpus: float = 0.0,
        entrypoint_gpus: float = 0.0,
    ) -> None:
        body: dict[str, Any] = {"entrypoint": entrypoint, "submission_id": submission_id,
                                "runtime_env": {"env_vars": env_vars}, "metadata": metadata}  # fmt: skip
        if entrypoint_cpus:
            body["entrypoint_num_cpus"] = entrypoint_cpus
        if entrypoint_gpus:
            body["entrypoint_num_gpus"] = entrypoint_gpus
        response = self._request("POST", "/api/jobs/", json=body)
        if response.status_code == 400 and "already exists" in response.text:
            raise RayJobExists(submission_id)
        if response.status_code >= 400:
            raise RayJobError(f"{response.status_code}: {response.text[-2000:]}")

    def info(self, submission_id: str) -> RayJobInfo | None:
        response = self._request("GET", f"/api/jobs/{submission_id}")
        if response.status_code == 404:
            return None
        if response.status_code >= 400:
            raise RayJobError(f"{response.status_code}: {response.text[-2000:]}")
        details = response.json()
        return RayJobInfo(status=str(details["status"]), message=details.get("message"))

    def stop(self, submission_id: str) -> bool:
        response = self._request("POST", f"/api/jobs/{submission_id}/stop")
        if response.status_code == 404:
            return False
        if response.status_code >= 400:
            raise RayJobError(f"{response.status_code}: {response.text[-2000:]}")
        return bool(response.json().get("stopped", False))

    def logs(self, submission_id: str) -> str | None:
        response = self._request("GET", f"/api/jobs/{submission_id}/logs")
        if response.status_code == 404:
            return None
        if response.status_code >= 400:
            raise RayJobError(f"{response.status_code}: {response.text[-2000:]}")
        return str(response.json().get("logs", ""))

    def _alive_nodes(self) -> list[Any]:
        """Ray's NodeState rows of the live nodes (the state API through the dashboard)."""
        from ray.util.state.api import StateApiClient
        from ray.util.state.common import RAY_MAX_LIMIT_FROM_API_SERVER, ListApiOptions, StateResource

        try:
            client = StateApiClient(address=self.address, headers=dict(self._headers))
            # Every node, dead ones too, filtered here: with Ray's own `state=ALIVE` filter, Ray 2.60 counts
            # the nodes it filtered out as truncated, so once any node has died (an autoscaler removed an
            # idle one) every read raised. The limit also cuts silently: the most the dashboard gives.
            options = ListApiOptions(
                detail=True, limit=RAY_MAX_LIMIT_FROM_API_SERVER, timeout=max(1, int(self.timeout_s))
            )
            # A partial answer (a busy dashboard drops nodes from it) raises instead of reading low.
            nodes = client.list(StateResource.NODES, options=options, raise_on_missing_output=True)
        except Exception as err:
            raise RayUnavailable(f"Ray dashboard at {self.address}: {err}") from err
        return [n for n in nodes if getattr(n, "state", None) == "ALIVE"]

    def nodes(self) -> list[dict[str, Any]]:
        """The live nodes as `{"node", "resources_total"}` (CPU, GPU, gpu_memory_mb, ...): the pool page's
        per-node GPU memory. Ray's state API lists totals only, not what is free on each node."""
        return [{"node": getattr(n, "node_name", None) or getattr(n, "node_ip", "?"),
                 "resources_total": dict(getattr(n, "resources_total", None) or {})}
                for n in self._alive_nodes()]  # fmt: skip

    def capacity(self) -> Resources:
        totals = [getattr(n, "resources_total", None) or {} for n in self._alive_nodes()]  # NodeState rows
        cpus = sum(float(t.get("CPU", 0)) for t in totals)
        gpus = sum(float(t.get("GPU", 0)) for t in totals)
        if not totals or (cpus <= 0 and not self.empty_ok):  # a fresh head lists no node yet: not a pool of 0
            raise RayUnavailable(f"Ray dashboard at {self.address} lists no live node with CPUs")
        return Resources(cpus=cpus, gpus=gpus)

    def ping(self) -> None:
        response = self._request("GET", "/api/version")
        if response.status_code >= 400:
            raise RayUnavailable(f"Ray dashboard at {self.address} answered {response.status_code}")


def ray_executable() -> str:
    beside = Path(sys.executable).with_name("ray")
    return str(beside) if beside.is_file() else (shutil.which("ray") or "ray")
