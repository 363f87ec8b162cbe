"""The only module that touches Ray: the `RayJobs` protocol, its Jobs-API adapter, and the local head.

The control plane talks to Ray's dashboard (Jobs SDK `JobSubmissionClient`, state API for the nodes'
resources) and never joins the cluster as a driver. Ray 2.60 dashboards want token auth: the token comes
from `RAY_AUTH_TOKEN` or `~/.ray/auth_token` and rides in an `Authorization` header. Tests use a fake with
the same protocol. Errors are mapped to three exceptions so callers never parse Ray's messages.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx

from service.scheduler import Resources

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
        self, *, submission_id: str, entrypoint: str, env_vars: dict[str, str], metadata: dict[str, str]
    ) -> None: ...

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


def auth_headers(token: str | None = None) -> dict[str, str]:
    token = token or os.environ.get("RAY_AUTH_TOKEN")
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH", Path.home() / ".ray" / "auth_token"))
    if not token and path.is_file():
        token = path.read_text().strip()
    return {"Authorization": f"Bearer {token}"} if token else {}


class JobSubmissionAdapter:
    """`RayJobs` over the Ray Jobs SDK, against the dashboard at `address` (http://host:8265)."""

    def __init__(self, address: str, *, token: str | None = None) -> None:
        self.address = address if "://" in address else f"http://{address}"
        self._headers = auth_headers(token)
        self._client: Any = None

    def _jobs(self) -> Any:
        if self._client is None:
            from ray.job_submission import JobSubmissionClient

            try:
                self._client = JobSubmissionClient(self.address, headers=dict(self._headers))
            except Exception as err:  # ConnectionError, AuthenticationError, ...
                raise RayUnavailable(f"Ray dashboard at {self.address}: {err}") from err
        return self._client

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(self._jobs(), method)(*args, **kwargs)
        except RayUnavailable:
            raise
        except RuntimeError as err:
            text = str(err)
            if "status code 404" in text or "does not exist" in text:
                raise LookupError(text) from err
            if "already exists" in text:
                raise RayJobExists(text) from err
            raise RayJobError(text[:2000]) from err
        except Exception as err:  # requests' ConnectionError, Timeout, auth errors
            self._client = None
            raise RayUnavailable(f"Ray dashboard at {self.address}: {err}") from err

    def submit(
        self, *, submission_id: str, entrypoint: str, env_vars: dict[str, str], metadata: dict[str, str]
    ) -> None:
        self._call(
            "submit_job",
            entrypoint=entrypoint,
            submission_id=submission_id,
            runtime_env={"env_vars": env_vars},
            metadata=metadata,
        )

    def info(self, submission_id: str) -> RayJobInfo | None:
        try:
            details = self._call("get_job_info", submission_id)
        except LookupError:
            return None
        return RayJobInfo(status=str(details.status.value), message=details.message)

    def stop(self, submission_id: str) -> bool:
        try:
            return bool(self._call("stop_job", submission_id))
        except LookupError:
            return False

    def logs(self, submission_id: str) -> str | None:
        try:
            return str(self._call("get_job_logs", submission_id))
        except LookupError:
            return None

    def capacity(self) -> Resources:
        from ray.util.state.api import StateApiClient
        from ray.util.state.common import ListApiOptions, StateResource

        try:
            client = StateApiClient(address=self.address, headers=dict(self._headers))
            nodes = client.list(
                StateResource.NODES,
                options=ListApiOptions(detail=True, filters=[("state", "=", "ALIVE")]),
                raise_on_missing_output=False,
            )
        except Exception as err:
            raise RayUnavailable(f"Ray dashboard at {self.address}: {err}") from err
        totals = [getattr(n, "resources_total", {}) for n in nodes]  # NodeState rows
        cpus = sum(float(t.get("CPU", 0)) for t in totals)
        gpus = sum(float(t.get("GPU", 0)) for t in totals)
        return Resources(cpus=cpus, gpus=gpus)

    def ping(self) -> None:
        try:
            httpx.get(f"{self.address}/api/version", headers=self._headers, timeout=3).raise_for_status()
        except httpx.HTTPError as err:
            raise RayUnavailable(f"Ray dashboard at {self.address}: {err}") from err


def ray_executable() -> str:
    beside = Path(sys.executable).with_name("ray")
    return str(beside) if beside.is_file() else (shutil.which("ray") or "ray")


def start_local_head(
    *, num_cpus: int | None, num_gpus: int | None, dashboard_port: int, temp_dir: Path | None = None
) -> str:
    """Start (or find) a Ray head on this machine with token auth; return its dashboard URL.

    The head outlives the control plane on purpose: sweeps keep running across a restart of the service
    (stop it with `ray stop`).
    """
    address = f"http://127.0.0.1:{dashboard_port}"
    adapter = JobSubmissionAdapter(address)
    try:
        adapter.ping()
        logger.info("found a Ray head at %s", address)
        return address
    except RayUnavailable:
        pass
    ray = ray_executable()
    env = {**os.environ, "RAY_AUTH_MODE": "token"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    subprocess.run([ray, "get-auth-token", "--generate"], env=env, check=True, capture_output=True)
    cmd = [ray, "start", "--head", "--disable-usage-stats", "--include-dashboard=true"]
    cmd += ["--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}"]
    cmd += [f"--num-cpus={num_cpus}"] if num_cpus is not None else []
    cmd += [f"--num-gpus={num_gpus}"] if num_gpus is not None else []
    cmd += [f"--temp-dir={temp_dir}"] if temp_dir is not None else []
    logger.info("starting a local Ray head: %s", " ".join(cmd))
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=180)
    adapter = JobSubmissionAdapter(address)
    deadline = time.monotonic() + 60
    while True:
        try:
            adapter.ping()
            return address
        except RayUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
