"""Where a command's CPU goes, by kind of process: `python -m tests.support.cpu_census -- make test-all`.

Samples /proc every second while the command runs and charges each process on the machine (the command's
and any other) its CPU (user + system ticks), to a kind read from its command line when first seen: a Ray
job's driver, a Ray worker (trials, job supervisors and idle workers: Ray renames them after they start),
`smartune serve`, the Ray head's daemons, PostgreSQL, Chromium, a compose container's Python... Processes already running when it starts are charged only what
they use after. A process that lives less than a second is missed, and each is charged up to its last
sample, so the total reads a few percent under what the machine spent. Linux only; nothing but the
standard library, so it also measures a fresh clone's `make test-all`.

docs/testing.md § "Where the integration tiers' CPU goes" was measured with it."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

HZ = os.sysconf("SC_CLK_TCK")
KINDS = (  # (substring of the command line, kind): the first that matches wins
    ("worker.tune.sweep", "sweep driver"), ("worker.tune.audit", "audit driver"),
    ("default_worker.py", "Ray worker (trial, job supervisor, idle)"), ("ray::", "Ray worker (trial, job supervisor, idle)"),
    ("raylet", "Ray head: raylet"), ("gcs_server", "Ray head: GCS"), ("log_monitor", "Ray head: log monitor"),
    ("dashboard/agent.py", "Ray head: dashboard"), ("dashboard/dashboard.py", "Ray head: dashboard"),
    ("ray-dashboard-", "Ray head: dashboard"), ("multiprocessing.forkserver", "Ray head: dashboard"),
    ("runtime_env/agent", "Ray head: other daemons"), ("monitor.py", "Ray head: other daemons"),
    ("ray.util.client.server", "Ray head: other daemons"), ("ray start", "Ray head: other daemons"),
    ("smartune serve", "smartune serve"), ("mlflow", "MLflow server"), ("huey", "MLflow server"),
    ("/opt/venv/", "compose containers' Python"), ("import sys;exec(", "pytest (xdist workers)"), ("pytest", "pytest"),
    ("postgres", "PostgreSQL"), ("chrom", "Chromium"), ("cc1plus", "C++ compiler (torch.compile)"),
    ("runc", "Docker"), ("containerd", "Docker"), ("dockerd", "Docker"), ("sleep 1", "Ray job watchdog (sleep 1)"),
)  # fmt: skip


def kind_of(command: str) -> str:
    for needle, kind in KINDS:
        if needle in command:
            return kind
    module = re.search(r"-m (\S+)", command)
    return f"python -m {module.group(1)}" if module else (command.split(" ")[0][-40:] or "kernel threads")


def _ticks(pid: str) -> int:
    with open(f"/proc/{pid}/stat") as stat:  # utime and stime: fields 14 and 15, after the ")" of comm
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


class Census:
    """CPU ticks by kind of process since start()."""

    def __init__(self) -> None:
        # pid -> [ticks when first seen (0 for a process started since), ticks when last seen, kind]
        self.seen: dict[str, list[int | str]] = {}
        self.stop = threading.Event()

    def sample(self, first: bool = False) -> None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                ticks = _ticks(pid)
                if pid in self.seen:
                    self.seen[pid][1] = ticks
                    continue
                command = (
                    Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
                self.seen[pid] = [ticks if first else 0, ticks, kind_of(command.strip())]
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue  # ended while read

    def run(self) -> None:
        self.sample(first=True)
        while not self.stop.wait(1.0):
            self.sample()

    def table(self) -> tuple[float, list[tuple[str, float, int]]]:
        seconds: Counter[str] = Counter()
        count: Counter[str] = Counter()
        for start, last, kind in self.seen.values():
            seconds[str(kind)] += (int(last) - int(start)) / HZ
            count[str(kind)] += 1
        return sum(seconds.values()), [(k, s, count[k]) for k, s in seconds.most_common() if s >= 0.05]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to measure after --")
    census = Census()
    sampler = threading.Thread(target=census.run, daemon=True)
    sampler.start()
    started = time.monotonic()
    status = subprocess.call(command)
    census.stop.set()
    sampler.join()
    wall = time.monotonic() - started
    total, rows = census.table()
    lines = [f"{' '.join(command)}: exit {status}, {wall:.0f} s wall, {total:.0f} CPU-s seen "
             f"({total / wall / (os.cpu_count() or 1):.0%} of {os.cpu_count()} cores)"]  # fmt: skip
    lines += [f"{s:8.1f} s {s / total:6.1%} {n:5d}  {kind}" for kind, s, n in rows[:30]]
    print("\n".join(lines), file=sys.stderr)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
