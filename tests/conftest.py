"""Shared test settings: offline Hugging Face, the GLUE folder from SMARTUNE_GLUE_DIR, the tiers (each test
marked `unit`, `integration` or `slow` from what it starts) and the unit tier's guard."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.support.cluster import RayHead

pytest_plugins = ["tests.support.durations"]  # longest modules first; `make test-durations` records

# Nothing in the tests may reach a hub: the packaged MiniLM and tiny random configs only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

_SIBLING_GLUE = Path(__file__).resolve().parents[2] / "shared" / "data" / "glue"
if not os.environ.get("SMARTUNE_GLUE_DIR") and _SIBLING_GLUE.is_dir():
    os.environ["SMARTUNE_GLUE_DIR"] = str(_SIBLING_GLUE)  # the checkout's ../shared, as in CI


def _disk_line(when: str) -> str:
    folder = tempfile.gettempdir()
    usage = shutil.disk_usage(folder)
    return f"disk {when}: {usage.free / 2**30:.1f} GiB free of {usage.total / 2**30:.0f} GiB under {folder}"


def pytest_report_header() -> str:
    """The disk's room in the log's first lines: a suite on a disk that fills (CI's is shared) fails in ways
    that name no cause (Ray's spilling, SQLite, log writes)."""
    return _disk_line("at the start")


# Where a run writes most (docs/testing.md § Times by stop): listed at the end when the disk is nearly full.
_DISK_WRITERS = ("/tmp", "/var/lib/docker", "/var/cache/apt", "/var/log", str(Path.home() / ".cache"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminalreporter.write_line(_disk_line("at the end"))
    usage = shutil.disk_usage(tempfile.gettempdir())
    if usage.free < usage.total * 0.10:  # name what filled it (CI's disk is shared: it may be no one here)
        folders = [folder for folder in _DISK_WRITERS if Path(folder).is_dir()]
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            said = subprocess.run(["du", "-x", "-s", "-B1G", *folders], capture_output=True, text=True,
                                  timeout=120, check=False).stdout  # fmt: skip
            terminalreporter.write_line(f"the disk is nearly full; GiB in the folders a run writes:\n{said}")


@pytest.fixture(scope="session")
def mlflow_store_template() -> Path:
    """An empty MLflow SQLite store, created once per process (MLflow's own migrations: 3 to 7 s here)."""
    from tests.support import store_templates

    return store_templates.templates() / store_templates.MLFLOW_STORE


@pytest.fixture
def mlflow_uri(tmp_path: Path, mlflow_store_template: Path) -> str:
    """A real, empty MLflow SQLite store of the test's own, `tmp_path/mlflow.db` (a copy of the template)."""
    path = tmp_path / "mlflow.db"
    shutil.copyfile(mlflow_store_template, path)
    return f"sqlite:///{path}"


@pytest.fixture(scope="session")
def ray_head() -> Iterator[RayHead]:
    """`ray start --head` (4 CPUs, 2 logical GPUs, token auth, the dashboard's Jobs API), one per test
    session (per xdist worker): the servers of tests/integration submit their jobs to it, and the sweep
    tests' `ray_cluster` (tests/worker/conftest.py) connects the test process to it as a driver. One head
    rather than one each: an idle head costs 4.4 to 5.5 CPU-s a minute here (docs/testing.md)."""
    from tests.support.cluster import start_ray_head

    head = start_ray_head()
    yield head
    head.stop()


@pytest.fixture(scope="session")
def glue_dir() -> Path:
    """The real GLUE folder; tests that need it skip with the reason when it is absent."""
    value = os.environ.get("SMARTUNE_GLUE_DIR", "")
    if not value or not (Path(value) / "RTE" / "train.tsv").is_file():
        pytest.skip("real GLUE data absent: set SMARTUNE_GLUE_DIR to a folder with RTE/train.tsv")
    return Path(value)


# ---------------------------------------------------------------------------------------------------------
# Tiers (docs/testing.md § Tiers). A test's tier follows from what it starts, never from a hand-set mark:
#   slow         the existing hand-set `slow` marks (faults, load, long sweeps): only in `make test-all`;
#   integration  a real process or server: the fixtures below, anything under tests/integration, or a test
#                that requests `starts_processes` because it runs a program itself;
#   unit         the rest: in-process only (the app with fakes, tiny models); `make test` runs it with the
#                guard below (SMARTUNE_UNIT_GUARD=1), which fails a unit test that forks or binds a socket.

# Fixtures that start a process or a server, and what they start (a test that uses one, even through
# another fixture, is an integration test).
INTEGRATION_FIXTURES = {
    "ray_cluster": "the test process as a Ray driver of `ray_head` (tests/worker/conftest.py)",
    "ray_head": "`ray start --head` with token auth, one per session (below)",
    "server": "`smartune serve` as a process on the Ray head",
    "postgres": "a PostgreSQL server (initdb + postgres)",
    "ray_env": "`smartune serve` starting its own Ray head (tests/integration/test_local_head.py)",
    "served": "uvicorn serving the app on a port (test_http_event_loop, test_dashboard_browser)",
    "browser": "Chromium through Playwright",
    "starts_processes": "the test runs a program itself: subprocess, `python -m ...`, a script",
}
INTEGRATION_FOLDERS = ("tests/integration/",)  # servers, Ray, PostgreSQL, Chromium, `mlflow server`
TIERS = ("unit", "integration", "slow")
_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")  # session: a module-scoped fixture that starts a program may request it
def starts_processes() -> None:
    """Requested by a test (or a fixture) that starts programs or servers itself: a `python -c` child, a
    process pool, kubectl, bash, a uvicorn process. It puts the test in the integration tier; the unit
    guard fails a unit test that starts one without it."""


@pytest.fixture(autouse=True)
def unit_tier_in_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """What the unit tier changes to run in-process and fast. A training run records a fixed commit instead
    of asking `git` (two processes; tests/worker/training/test_provenance.py runs the real one). torch runs
    on one thread: tiny models gain nothing from two, and two threads contending with the other xdist
    worker make a step many times slower (the MiniLM run of test_train_cli: 108 s on two, 23 s on one)."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    import torch

    from worker.training import provenance

    monkeypatch.setattr(provenance, "code_version", lambda: {"git_commit": "0" * 40, "git_dirty": False})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _direct_params(item: pytest.Item) -> set[str]:
    """Names a test parametrizes directly: they shadow a fixture of the same name (test_load_bench's
    `postgres` is a bool)."""
    names: set[str] = set()
    for mark in item.iter_markers("parametrize"):
        argnames = mark.args[0] if mark.args else mark.kwargs["argnames"]
        argnames = [a.strip() for a in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
        indirect = mark.kwargs.get("indirect", False)
        names |= {a for a in argnames if not (indirect is True or (indirect and a in indirect))}
    return names


def tier_of(item: pytest.Item) -> str:
    own = [name for name in TIERS if item.get_closest_marker(name) is not None]
    if own and own != ["slow"]:
        raise pytest.UsageError(f"{item.nodeid}: `{own}` is set by hand; tiers follow from the fixtures used")
    if own:
        return "slow"
    path = item.path.resolve()
    where = path.relative_to(_ROOT).as_posix() if path.is_relative_to(_ROOT) else path.as_posix()
    if where.startswith(INTEGRATION_FOLDERS):
        return "integration"
    fixtures = set(getattr(item, "fixturenames", ())) - _direct_params(item)
    return "integration" if fixtures & INTEGRATION_FIXTURES.keys() else "unit"


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = tier_of(item)
        if tier != "slow":
            item.add_marker(getattr(pytest.mark, tier))
        found = [name for name in TIERS if item.get_closest_marker(name) is not None]
        assert found == [tier], f"{item.nodeid}: tier markers {found}, expected exactly [{tier!r}]"


# The unit guard: with SMARTUNE_UNIT_GUARD=1, a unit test (its fixtures included) that starts a process or
# binds a socket fails, naming the test, even when the code under test swallows the error.
class UnitTierViolation(BaseException):  # not an Exception: `except Exception` in the code cannot hide it
    pass


_violations: dict[str, list[str]] = {}


@contextlib.contextmanager
def _unit_guard(nodeid: str) -> Iterator[None]:
    import _posixsubprocess
    import platform
    import socket
    import subprocess

    platform.processor()  # the stdlib's cached `uname -p` probe (provenance reads it): not the test's process

    def refuse(what: str) -> Callable[..., Any]:
        def refused(*args: object, **_kwargs: object) -> Any:
            detail = f"{what} {args[1:] if what.startswith('socket') else args[:1]}"[:300]
            message = (
                f"{nodeid}: a unit test may not start a process or a server ({detail}); use a fake, or "
                f"request a fixture of INTEGRATION_FIXTURES (tests/conftest.py) such as `starts_processes`"
            )
            _violations.setdefault(nodeid, []).append(message)
            raise UnitTierViolation(message)

        return refused

    patches = [(subprocess.Popen, "_execute_child", "subprocess.Popen"), (_posixsubprocess, "fork_exec", "fork_exec"),
               (socket.socket, "bind", "socket.bind"), (socket.socket, "listen", "socket.listen")]  # fmt: skip
    patches += [
        (os, name, f"os.{name}") for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system")
    ]
    saved = [(owner, name, owner.__dict__.get(name)) for owner, name, _what in patches]  # None: inherited
    for owner, name, what in patches:
        setattr(owner, name, refuse(what))
    try:
        yield
    finally:
        for owner, name, original in saved:
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if os.environ.get("SMARTUNE_UNIT_GUARD") != "1" or item.get_closest_marker("unit") is None:
        return (yield)
    with _unit_guard(item.nodeid):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report = yield
    if report.failed:
        _violations.pop(item.nodeid, None)  # reported with its traceback
    elif report.when == "teardown" and item.nodeid in _violations:
        report.outcome = "failed"  # a violation in a thread, or one the code swallowed, still fails the test
        report.longrepr = "\n".join(_violations.pop(item.nodeid))
    return report
