"""`smartune stop`: stop what `smartune serve` (`make run`) started on this machine: the service, then the
local Ray head it started, found through `<data dir>/run/`. Also after a crash left the head running."""

from __future__ import annotations

import argparse
from pathlib import Path

from cli.completion_cmd import DIRECTORY, completes


def register(sub: argparse._SubParsersAction) -> None:
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
    from service.local_head import stop_recorded

    data_dir = Path(args.data_dir).expanduser().resolve() if args.data_dir else Settings().data_dir
    done = stop_recorded(data_dir)
    print("\n".join(done) if done else f"nothing recorded as running in {data_dir / 'run'}")
    return 0
