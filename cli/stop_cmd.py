"""`smartune stop`: stop what `smartune serve` (`make run`) started on this machine: the service, then the
local Ray head it started, found through `<data dir>/run/`. Also after a crash left the head running: then
the jobs that head ran are requeued here, as the service does at a clean exit (service/engine/planned_stop.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from cli.completion_cmd import DIRECTORY, completes


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "stop",
        help="stop the service and the local Ray head that `smartune serve` started",
        description="Stops the processes recorded in <data dir>/run/ (a pid is signalled only while its "
        "command line is still the recorded one).",
    )
    completes(
        p.add_argument(
            "--data-dir", default=None, help="the service's data dir ($SMARTUNE_DATA_DIR, ~/.smartune)"
        ),
        DIRECTORY,
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from service.config import Settings
    from service.engine.planned_stop import requeue_in_store
    from service.engine.run_records import stop_recorded

    settings = Settings(data_dir=Path(args.data_dir).expanduser().resolve()) if args.data_dir else Settings()
    data_dir = settings.data_dir
    done = stop_recorded(data_dir)
    has_store = settings.database_url is not None or (data_dir / "smartune.db").is_file()
    if has_store and any(line.startswith("stopped ray-head") for line in done):
        # A head left behind by a crashed service: its jobs are requeued as after a clean stop.
        requeued = requeue_in_store(settings)
        done += [f"requeued {len(requeued)} running job(s)"] if requeued else []
    print("\n".join(done) if done else f"nothing recorded as running in {data_dir / 'run'}")
    return 0
