"""What the embedded deployment runs, recorded under `<data dir>/run/`: `serve.json` (the service) and
`ray-head.json` (the Ray head it started), each a pid, its command line and an address.

`smartune stop` (and `make stop`) stops what they record, also after a crash left it behind, and a
`smartune serve` reuses the head its own record names (service.engine.local_head). A pid is signalled, or
trusted as this deployment's head, only while its command line is still the recorded one (pids are reused).
Each deployment has its own data dir, hence its own records: nothing here reaches another deployment's head.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

STOP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class RecordedHead:
    """A head this deployment started that still runs, from its run record."""

    pid: int
    address: str  # the dashboard URL
    record: Path  # run/ray-head.json


def run_dir(data_dir: Path) -> Path:
    return data_dir / "run"


def recorded_head(data_dir: Path) -> RecordedHead | None:
    """The head this deployment's run record names, while its pid still runs the recorded command; a stale
    record (the head is gone, or its pid now runs something else) is removed."""
    path = run_dir(data_dir) / "ray-head.json"
    try:
        entry = json.loads(path.read_text())
        pid, recorded, address = int(entry["pid"]), str(entry["cmdline"]), str(entry["address"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        path.unlink(missing_ok=True)  # unreadable: nothing can be checked against it
        return None
    if _alive(pid) and cmdline_of(pid) in (recorded, "?"):
        return RecordedHead(pid, address, path)
    path.unlink(missing_ok=True)
    return None


def record_head(record: Path, pid: int, address: str) -> None:
    """The head's pid and command line in run/ray-head.json. Right after Popen the child may not have
    exec'd yet (its command line is still this process's), so read it once it differs, for a moment."""
    own, deadline = cmdline_of(os.getpid()), time.monotonic() + 5
    cmdline = cmdline_of(pid)
    while cmdline in (own, "") and time.monotonic() < deadline:
        time.sleep(0.05)
        cmdline = cmdline_of(pid)
    record.write_text(json.dumps({"pid": pid, "address": address, "cmdline": cmdline}))


def record_serve(data_dir: Path, url: str) -> Path:
    folder = run_dir(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "serve.json"
    path.write_text(json.dumps({"pid": os.getpid(), "url": url, "cmdline": cmdline_of(os.getpid())}))
    return path


def cmdline_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:  # gone (or not Linux: then trust the pid's liveness alone)
        return "" if Path("/proc").is_dir() else "?"


def _alive(pid: int) -> bool:
    """The pid runs: it exists and is not a zombie (a service that exited but that its parent, a test or a
    supervisor, has not reaped yet: `smartune stop` waited out its whole timeout for one)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return process_state(Path(f"/proc/{pid}/stat").read_text()) != "Z"
    except OSError:  # gone meanwhile, or not Linux
        return Path(f"/proc/{pid}").is_dir() or not Path("/proc").is_dir()


def process_state(stat: str) -> str:
    """The state letter of a /proc/PID/stat line ("R", "S", "Z", ...): the field after the command name,
    which is in parentheses and may itself contain spaces and parentheses."""
    return stat.rpartition(")")[2].split()[0]


def stop_recorded(data_dir: Path) -> list[str]:
    """Stop what `<data dir>/run/` records (the service first, then the head); return what was done. Only
    this deployment's: another deployment's head has its own record, in its own data dir."""
    done = [stop_record(run_dir(data_dir) / name) for name in ("serve.json", "ray-head.json")]
    return [line for line in done if line is not None]


def stop_record(path: Path) -> str | None:
    """SIGTERM (then SIGKILL) the recorded pid while it runs the recorded command; remove the record."""
    if not path.is_file():
        return None
    entry = json.loads(path.read_text())
    pid, recorded = int(entry["pid"]), str(entry["cmdline"])
    cmdline, said = cmdline_of(pid), None
    if _alive(pid) and (cmdline == recorded or cmdline == "?"):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
        said = f"stopped {path.name.removesuffix('.json')} (pid {pid})"
    path.unlink(missing_ok=True)
    return said
