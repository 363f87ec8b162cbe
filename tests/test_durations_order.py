"""The xdist tiers' order: modules with the most recorded seconds first, each module together and in order."""

from __future__ import annotations

import types
from pathlib import Path

from xdist.scheduler.loadscope import LoadScopeScheduling

from tests.support.durations import longest_first


def test_the_slowest_module_starts_first_and_keeps_its_tests_in_order() -> None:
    ids = ["a.py::one", "a.py::two", "b.py::slow", "b.py::quick", "c.py::new", "d.py::x"]
    seconds = {"a.py::one": 5, "a.py::two": 5, "b.py::slow": 200, "b.py::quick": 1, "d.py::x": 30}

    order = [ids[i] for i in longest_first(ids, seconds)]

    assert order == ["b.py::slow", "b.py::quick", "d.py::x", "a.py::one", "a.py::two", "c.py::new"]


def test_without_a_record_the_collection_order_stays() -> None:
    ids = ["z.py::a", "a.py::b", "z.py::c"]
    assert [ids[i] for i in longest_first(ids, {})] == ["z.py::a", "z.py::c", "a.py::b"]


class _Node:
    """A stand-in for an xdist worker: records the test indexes the scheduler sends it."""

    def __init__(self, name: str) -> None:
        self.gateway = types.SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent: list[int] = []

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent += indexes

    def shutdown(self) -> None:
        pass


class _Config:
    """What xdist's LoadScopeScheduling reads of pytest's config, as `make test-all`'s options set it."""

    def __init__(self, *, reorder: bool) -> None:
        self.option = types.SimpleNamespace(loadscopereorder=reorder)

    def getvalue(self, name: str) -> object:
        assert name == "tx"
        return ["2*popen"]


def _first_modules(reorder: bool) -> list[str]:
    """The module each of two workers is handed first, for a collection already in longest-first order: two
    slow modules of one or two tests, then quick ones of many (as parametrized unit modules)."""
    collection = ["slow.py::only", "big.py::a", "big.py::b"]
    collection += [f"many{m}.py::t[{i}]" for m in range(4) for i in range(3 + m)]
    scheduler = LoadScopeScheduling(_Config(reorder=reorder))  # type: ignore[arg-type]
    nodes = [_Node("gw0"), _Node("gw1")]
    for node in nodes:
        scheduler.add_node(node)  # type: ignore[arg-type]
        scheduler.add_node_collection(node, collection)  # type: ignore[arg-type]
    scheduler.schedule()
    return [collection[node.sent[0]].split("::")[0] for node in nodes]


def test_xdist_keeps_the_longest_first_order_only_without_its_own_reorder() -> None:
    """pytest-xdist 3's `--dist loadscope` hands out modules by their number of tests, most first, unless
    `--no-loadscope-reorder`: until 2026-11-29 the suite's one-test integration modules (the slowest) ran
    last, after every parametrized unit module. `make test-all` and `make test-integration` pass the flag."""
    assert _first_modules(reorder=True)[0] == "many3.py"  # xdist's own order: the most tests first
    assert _first_modules(reorder=False) == ["slow.py", "big.py"]  # the collection's: longest first
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    (line,) = [line for line in makefile.splitlines() if line.startswith("INTEGRATION_TESTS :=")]
    assert "--dist loadscope" in line and "--no-loadscope-reorder" in line, line
