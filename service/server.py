"""`smartune serve`: the one command of the embedded deployment (docs/architecture.md §7).

Without `RAY_ADDRESS` it starts this deployment's own local Ray head (or reuses the one it started earlier,
after checking its auth; never another deployment's: service.engine.head_plan), serves the API with
uvicorn, and on exit stops that head unless `keep_ray` is set, then requeues the jobs that head
ran as a planned stop (service.engine.planned_stop). The job store, MLflow store and Tune storage live in the
data directory; `<data dir>/run/` records the running processes for `smartune stop`. Logs go to stderr, as JSON lines or text (`SMARTUNE_LOG_FORMAT`; service.http.logs), uvicorn's
access lines included.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

import uvicorn

from service.config import Settings
from service.engine import head_plan, local_head, planned_stop, run_records
from service.http import logs
from service.main import DASHBOARD_HOME, create_app, key_file


def serve(settings: Settings, *, log_level: str = "info") -> None:
    logs.configure(json=settings.json_logs, level=log_level)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    head: local_head.LocalHead | None = None
    if not settings.ray_address:
        ports, explicit = head_plan.requested_ports(settings)
        head = local_head.start_or_reuse(
            settings.data_dir,
            num_cpus=settings.ray_num_cpus,
            num_gpus=settings.ray_num_gpus,
            ports=ports,
            explicit=explicit,
            temp_dir=settings.ray_temp_dir,
            extra_args=settings.ray_start_args,
            token=settings.ray_auth_token,
        )
        print(f"smartune: {head.said}", flush=True)  # noqa: T201
        python = settings.entrypoint_python or sys.executable  # the head runs on this machine, in this venv
        updates: dict[str, object] = {
            "ray_address": head.address,
            "ray_auth_token": head.token,
            "entrypoint_python": python,
        }
        if head.process is not None:  # started here, so its size is known before Ray lists its node
            size = local_head.declared_size(
                settings.ray_num_cpus, settings.ray_num_gpus, settings.ray_start_args
            )
            updates |= {name: value for name, value in size.items() if getattr(settings, name) is None}
        settings = settings.model_copy(update=updates)
    url = f"http://{settings.host}:{settings.port}/"
    record = run_records.record_serve(settings.data_dir, url)
    for line in banner(settings):
        print(f"smartune: {line}", flush=True)  # noqa: T201
    # uvicorn shuts down gracefully on SIGTERM, then re-raises it with the handler found here: make that
    # an ordinary exit, so the `finally` below runs (a default SIGTERM would end the process there).
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        # log_config=None: uvicorn's loggers keep the root handler configured above (its format, the request id
        # on access lines) instead of uvicorn's own.
        uvicorn.run(
            create_app(settings), host=settings.host, port=settings.port, log_level=log_level, log_config=None
        )
    finally:
        record.unlink(missing_ok=True)
        if head is not None and head.record is not None:  # this deployment's head: started or reused
            if settings.keep_ray:
                print(f"smartune: the Ray head at {head.address} keeps running (--keep-ray)", flush=True)  # noqa: T201
            else:
                print(f"smartune: stopping this deployment's Ray head at {head.address}", flush=True)  # noqa: T201
                local_head.stop(head)
                if requeued := planned_stop.requeue_in_store(settings):
                    said = f"requeued {len(requeued)} running job(s); they resume at the next start"
                    print(f"smartune: {said}", flush=True)  # noqa: T201


def banner(settings: Settings) -> list[str]:
    """What a newcomer needs from the start-up: the API and its docs, the dashboard, where the admin key
    is and how a team's key is made, Ray, the data, how to stop."""
    url = f"http://{settings.host}:{settings.port}"
    key = key_file(settings)
    admin = (f"admin key in {key}" if settings.bootstrap_admin or key.exists()
             else "no admin key file (SMARTUNE_BOOTSTRAP_ADMIN is off): `smartune admin create-key --admin`")  # fmt: skip
    return [
        f"API at {url}/api/v1 (docs at {url}/docs; the job spec's schema at {url}/api/v1/schema/jobspec)",
        f"dashboard at {url}{DASHBOARD_HOME} (sign in with an API key)",
        f"{admin}; jobs are submitted with a team's key: `smartune admin create-team NAME` prints one",
        f"Ray at {settings.ray_address}; data in {settings.data_dir}; stop with Ctrl-C or `smartune stop`",
    ]


def _exit_on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(0)
