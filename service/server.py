"""`smartune serve`: the one command of the embedded deployment (docs/architecture.md §7).

Starts (or finds) a local Ray head when `RAY_ADDRESS` is unset, then serves the API and the placeholder
page with uvicorn. The job store, MLflow store and Tune storage live in the data directory.
"""

from __future__ import annotations

import logging
import sys

import uvicorn

from service.config import Settings
from service.main import create_app
from service.ray_jobs import start_local_head


def serve(settings: Settings, *, log_level: str = "info") -> None:
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    if not settings.ray_address:
        address = start_local_head(
            num_cpus=settings.ray_num_cpus,
            num_gpus=settings.ray_num_gpus,
            dashboard_port=settings.ray_dashboard_port,
            temp_dir=settings.ray_temp_dir,
        )
        python = settings.entrypoint_python or sys.executable  # the head runs on this machine, in this venv
        settings = settings.model_copy(update={"ray_address": address, "entrypoint_python": python})
    print(  # noqa: T201
        f"smartune: http://{settings.host}:{settings.port}/ (API docs at /docs); Ray at {settings.ray_address}; "
        f"data in {settings.data_dir}",
        flush=True,
    )
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=log_level)
