"""Longest work first: the xdist tiers start their slowest test modules first, and a run can record how
long each test took.

pytest-xdist hands out work in collection order (`--dist loadscope --no-loadscope-reorder`: each module is one
unit, so its module-scoped fixtures are built once; without the flag xdist 3 hands out the modules with the
most tests first, which put the one-test integration modules, the slowest, last). A module that takes 8
minutes and happens to be collected last starts when the other worker is about to finish, and the run waits
for it alone. So the collection is ordered by each module's recorded time, longest first (the classic longest-
processing-time rule); a module's tests stay together and in their own order (module-scoped fixtures are built
once, and a module's tests may build on each other). Modules without a record (new ones) come last, in their
usual order.

The record is `tests/durations.json`: seconds per test id (setup + call + teardown), written by a run with
`SMARTUNE_TEST_DURATIONS_OUT=FILE` (`make test-durations`). A stale record only changes the order.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

RECORD = Path(__file__).resolve().parents[1] / "durations.json"
OUT_ENV = "SMARTUNE_TEST_DURATIONS_OUT"
_measured: dict[str, float] = defaultdict(float)  # test id -> seconds, on the controller (or a plain run)


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def longest_first(nodeids: list[str], seconds: dict[str, float]) -> list[int]:
    """The order (indexes into `nodeids`) that puts the modules with the most recorded seconds first,
    keeping each module's tests together and in order; unrecorded modules last, as collected."""
    totals: dict[str, float] = defaultdict(float)
    first: dict[str, int] = {}
    for index, nodeid in enumerate(nodeids):
        module = module_of(nodeid)
        totals[module] += seconds.get(nodeid, 0.0)
        first.setdefault(module, index)
    return sorted(range(len(nodeids)), key=lambda i: (-totals[module_of(nodeids[i])],
                                                      first[module_of(nodeids[i])], i))  # fmt: skip


def _test_id(nodeid: str) -> str:
    """The test id without the `@group` suffix that xdist's loadgroup adds."""
    head, _, group = nodeid.rpartition("@")
    return head if head and "::" in head and "::" not in group and "]" not in group else nodeid


def _recorded() -> dict[str, float]:
    try:
        data = json.loads(RECORD.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


@pytest.hookimpl(trylast=True)  # after tests/conftest.py has marked the tiers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    order = longest_first([_test_id(item.nodeid) for item in items], _recorded())
    items[:] = [items[i] for i in order]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _measured[_test_id(report.nodeid)] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get(OUT_ENV)
    if not out or hasattr(session.config, "workerinput"):  # an xdist worker: its controller writes
        return
    path = Path(out)  # merged: `make test-all` runs the unit tier, then the integration tiers
    merged = (json.loads(path.read_text()) if path.is_file() else {}) | {
        k: round(v, 2) for k, v in _measured.items()
    }
    path.write_text(json.dumps(dict(sorted(merged.items())), indent=0) + "\n")
