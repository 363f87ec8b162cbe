"""`smartune serve`: run the control plane (API, scheduler, dispatcher) with SQLite in a data directory;
`smartune stop` ends it (cli/stop_cmd.py)."""

from __future__ import annotations

import argparse
from typing import Any

from cli.completion_cmd import DIRECTORY, completes


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="run the REST control plane (starts a local Ray head when RAY_ADDRESS is unset)",
        description="Serve the API on http://HOST:PORT/. Each flag falls back to its environment variable.",
    )
    p.add_argument("--host", default=None, help="listen address ($SMARTUNE_HOST, default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="listen port ($SMARTUNE_PORT, default 8000)")
    completes(
        p.add_argument(
            "--data-dir",
            default=None,
            help="job store, MLflow store, Tune storage ($SMARTUNE_DATA_DIR, ~/.smartune)",
        ),
        DIRECTORY,
    )
    p.add_argument(
        "--ray-num-cpus", type=int, default=None, help="CPUs of a local Ray head ($SMARTUNE_RAY_NUM_CPUS)"
    )
    p.add_argument(
        "--ray-num-gpus",
        type=int,
        default=None,
        help="(logical) GPUs of a local Ray head ($SMARTUNE_RAY_NUM_GPUS)",
    )
    p.add_argument(
        "--keep-ray",
        action="store_true",
        default=None,
        help="leave the local Ray head this starts running at exit: sweeps outlive the service "
        "($SMARTUNE_KEEP_RAY; stop it later with `smartune stop`)",
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from service.config import Settings
    from service.server import serve

    given: dict[str, Any] = {
        "host": args.host,
        "port": args.port,
        "data_dir": args.data_dir,
        "ray_num_cpus": args.ray_num_cpus,
        "ray_num_gpus": args.ray_num_gpus,
        "keep_ray": args.keep_ray,
    }
    serve(Settings(**{k: v for k, v in given.items() if v is not None}), log_level=args.log_level)
    return 0
