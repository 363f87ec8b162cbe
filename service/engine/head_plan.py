"""Where the embedded deployment's Ray head runs: reuse the one it started, or start its own (ports, temp dir, token).

Several deployments can run on one host under one account (two checkouts, or the users of a shared login), so
a head that merely answers on Ray's default ports is no proof of being ours: every head started under one
account used to share `~/.ray/auth_token`, and a second `smartune serve` attached to the first one's head and
its jobs. The rule, decided by `plan_head` (pure; its probes are passed in):

- a head is reused only when this deployment's run record (`<data dir>/run/ray-head.json`) names one that
  still runs (a service that crashed, or stopped with `--keep-ray`), or when the user names a head outright
  (`RAY_ADDRESS`: then no local head is planned at all);
- otherwise this deployment starts its own head. The ports Ray takes by default (GCS 6379, dashboard 8265,
  Ray client 10001, dashboard agent 52365; the others are random anyway) are kept when free and replaced by
  free ones when not; a port the user set (`SMARTUNE_RAY_HEAD_PORT`, `SMARTUNE_RAY_DASHBOARD_PORT`, or the
  flag in `SMARTUNE_RAY_START_ARGS`) is never moved: a taken one is refused, naming the variable;
- its temp dir (Ray's sessions, sockets and logs) is `<data dir>/ray`, unless `SMARTUNE_RAY_TEMP_DIR` says
  otherwise or that path is too long for Ray's Unix sockets (then a short folder in /tmp named after the
  data dir);
- its auth token is the deployment's own (`<data dir>/ray-auth-token`, mode 0600, made once), unless the user
  gives one (`RAY_AUTH_TOKEN`, `RAY_AUTH_TOKEN_PATH`), so another deployment cannot drive its jobs.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shlex
import socket
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from service.engine.run_records import RecordedHead

if TYPE_CHECKING:
    from service.config import Settings

# The ports `ray start --head` binds at fixed defaults; the rest (node manager, object manager, metrics,
# agent gRPC, runtime-env agent, workers) it picks at random or from a range, so two heads do not collide.
RAY_DEFAULT_PORTS: dict[str, int] = {
    "--port": 6379,
    "--dashboard-port": 8265,
    "--ray-client-server-port": 10001,
    "--dashboard-agent-listen-port": 52365,
}
PORT_NAMES = {
    "--port": "GCS",
    "--dashboard-port": "dashboard",
    "--ray-client-server-port": "Ray client",
    "--dashboard-agent-listen-port": "dashboard agent",
}
SETTING_OF = {"--port": "SMARTUNE_RAY_HEAD_PORT", "--dashboard-port": "SMARTUNE_RAY_DASHBOARD_PORT"}
# Ray's longest socket path is <temp dir>/session_<date>_<time>_<µs>_<pid>/sockets/plasma_store, at most 107
# bytes on Linux: the session folder and socket name take about 65 of them.
MAX_TEMP_DIR_BYTES = 40
TOKEN_FILE = "ray-auth-token"


class PortTaken(ValueError):
    """A port the user set for the local head is in use by something this deployment did not start (a
    ValueError: the CLI reports it as one line, naming the variable)."""


@dataclass(frozen=True)
class HeadPlan:
    reuse: RecordedHead | None  # set: attach to this deployment's running head, start nothing
    address: str  # the dashboard URL, http://127.0.0.1:PORT
    ports: dict[str, int]  # `ray start` flag -> port, every flag of RAY_DEFAULT_PORTS (empty when reusing)
    temp_dir: Path | None  # Ray's --temp-dir (None when reusing)
    said: str  # one line for the startup output


def requested_ports(settings: Settings) -> tuple[dict[str, int], frozenset[str]]:
    """The GCS and dashboard ports the settings ask for, and which of them the user set (an environment
    variable or an argument): a default is moved when taken, a port the user set never is."""
    names = {"--port": "ray_head_port", "--dashboard-port": "ray_dashboard_port"}
    wanted = {flag: int(getattr(settings, name)) for flag, name in names.items()}
    return wanted, frozenset(flag for flag, name in names.items() if name in settings.model_fields_set)


def given_ports(extra_args: str) -> dict[str, int]:
    """The fixed-default ports that `SMARTUNE_RAY_START_ARGS` sets (`--flag=N` or `--flag N`)."""
    words, found = shlex.split(extra_args), {}
    for i, word in enumerate(words):
        flag, _, value = word.partition("=")
        if flag in RAY_DEFAULT_PORTS:
            value = value or (words[i + 1] if i + 1 < len(words) else "")
            if value.isdigit():
                found[flag] = int(value)
    return found


def own_temp_dir(data_dir: Path) -> Path:
    """`<data dir>/ray`, or a short folder in the system temp dir named after the data dir when that is too
    long for Ray's socket paths."""
    inside = data_dir / "ray"
    if len(str(inside).encode()) <= MAX_TEMP_DIR_BYTES:
        return inside
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"smartune-ray-{digest}"


def plan_head(
    data_dir: Path,
    *,
    recorded: RecordedHead | None,
    wanted: Mapping[str, int],
    explicit: frozenset[str],
    temp_dir: Path | None,
    port_free: Callable[[int], bool],
    pick_port: Callable[[], int],
    ray_answers: Callable[[int], bool],
) -> HeadPlan:
    """Reuse the recorded head, else start this deployment's own.

    `wanted`: flag -> port for the flags of RAY_DEFAULT_PORTS (missing ones take Ray's default); `explicit`:
    the flags the user set (never moved). `port_free(port)`: nothing listens there; `pick_port()`: a free port
    now; `ray_answers(port)`: a Ray dashboard answers there (only for the message)."""
    if recorded is not None:
        said = (
            f"reusing this deployment's Ray head at {recorded.address} (pid {recorded.pid}, recorded in "
            f"{recorded.record}; `smartune stop` stops it)"
        )
        return HeadPlan(recorded, recorded.address, {}, None, said)
    ports: dict[str, int] = {}
    taken: list[str] = []
    for flag, default in RAY_DEFAULT_PORTS.items():
        port = wanted.get(flag, default)
        if port_free(port):
            ports[flag] = port
            continue
        if flag in explicit:
            setting = SETTING_OF.get(flag, f"{flag} in SMARTUNE_RAY_START_ARGS")
            raise PortTaken(
                f"{setting}: port {port} ({PORT_NAMES[flag]}) is in use by a Ray head or program that this "
                f"deployment ({data_dir}) did not start. To use that head, set RAY_ADDRESS to its dashboard URL "
                f"(and RAY_AUTH_TOKEN_PATH to its token file); to start this deployment's own, unset {setting} "
                "(free ports are then picked) or give a free port"
            )
        taken.append(f"{port} ({PORT_NAMES[flag]})")
        ports[flag] = _fresh_port(pick_port, set(ports.values()) | set(wanted.values()))
    folder = temp_dir if temp_dir is not None else own_temp_dir(data_dir)
    address = f"http://127.0.0.1:{ports['--dashboard-port']}"
    where = f"GCS port {ports['--port']}, dashboard {address}, temp dir {folder}"
    if not taken:
        return HeadPlan(None, address, ports, folder, f"starting this deployment's Ray head: {where}")
    dashboard = wanted.get("--dashboard-port", RAY_DEFAULT_PORTS["--dashboard-port"])
    whose = "a Ray head that belongs" if ray_answers(dashboard) else "a program (or a Ray head) that belongs"
    ports_are = f"port {taken[0]} is" if len(taken) == 1 else f"ports {', '.join(taken)} are"
    said = (
        f"{ports_are} in use by {whose} to another deployment (not started from {data_dir}); starting this "
        f"deployment's own head on {where}"
    )
    return HeadPlan(None, address, ports, folder, said)


def _fresh_port(pick_port: Callable[[], int], used: set[int]) -> int:
    for _ in range(100):
        port = pick_port()
        if port not in used:
            return port
    raise RuntimeError("no free port found for the local Ray head")


def port_free(port: int) -> bool:
    """Nothing listens on `port` on any address (SO_REUSEADDR: a port left in TIME_WAIT by a head that
    just stopped counts as free, as it is for Ray's own servers)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError:
            return False
    return True


def pick_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def deployment_token(
    data_dir: Path, given: str | None, environ: Mapping[str, str]
) -> tuple[str, dict[str, str]]:
    """The token a head started here checks, and the environment that hands it to `ray start` (and so to
    every driver and worker the head starts): the user's (`given`, i.e. RAY_AUTH_TOKEN; else the file at
    RAY_AUTH_TOKEN_PATH), else this deployment's own file, made once with 256 random bits (as Ray's
    `ray get-auth-token --generate` does) and mode 0600."""
    if given:
        return given, {"RAY_AUTH_TOKEN": given}
    if path := environ.get("RAY_AUTH_TOKEN_PATH"):
        return Path(path).read_text().strip(), {"RAY_AUTH_TOKEN_PATH": path}
    own = data_dir / TOKEN_FILE
    if not own.is_file():
        data_dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(own, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # made at this moment by another process of this deployment: read it below
        else:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_hex(32))
    return own.read_text().strip(), {"RAY_AUTH_TOKEN_PATH": str(own)}
