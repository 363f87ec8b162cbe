"""The xdist tiers' order: modules with the most recorded seconds first, each module together and in order."""

from __future__ import annotations

from tests.support.durations import longest_first


def test_the_slowest_module_starts_first_and_keeps_its_tests_in_order() -> None:
    ids = ["a.py::one", "a.py::two", "b.py::slow", "b.py::quick", "c.py::new", "d.py::x"]
    seconds = {"a.py::one": 5, "a.py::two": 5, "b.py::slow": 200, "b.py::quick": 1, "d.py::x": 30}

    order = [ids[i] for i in longest_first(ids, seconds)]

    assert order == ["b.py::slow", "b.py::quick", "d.py::x", "a.py::one", "a.py::two", "c.py::new"]


def test_without_a_record_the_collection_order_stays() -> None:
    ids = ["z.py::a", "a.py::b", "z.py::c"]
    assert [ids[i] for i in longest_first(ids, {})] == ["z.py::a", "z.py::c", "a.py::b"]
