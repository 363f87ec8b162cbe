"""The tiers' own machinery (tests/conftest.py): the unit guard refuses a process or a socket, naming the
test, and puts everything back; a name a test parametrizes directly does not count as the fixture."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from tests.conftest import UnitTierViolation, _direct_params, _unit_guard, _violations


def test_the_guard_refuses_a_process_and_a_socket_naming_the_test_then_restores_them() -> None:
    before = (subprocess.Popen._execute_child, os.fork, socket.socket.__dict__.get("bind"))  # type: ignore[attr-defined]
    with _unit_guard("tests/x.py::test_probe"):
        with pytest.raises(UnitTierViolation, match=r"tests/x.py::test_probe: .*\['true'\]"):
            subprocess.run(["true"])
        with pytest.raises(UnitTierViolation, match="socket.bind"), socket.socket() as server:
            server.bind(("127.0.0.1", 0))
        with pytest.raises(UnitTierViolation, match="os.system"):
            os.system("true")  # were the guard broken: a harmless `true` (os.fork() would fork pytest)
        a, b = socket.socketpair()  # no bind: an in-process pipe is allowed
        a.close()
        b.close()
    assert len(_violations.pop("tests/x.py::test_probe")) == 3  # kept for the report at teardown
    assert (subprocess.Popen._execute_child, os.fork, socket.socket.__dict__.get("bind")) == before  # type: ignore[attr-defined]


@pytest.mark.parametrize("postgres", [False])  # shadows the `postgres` fixture, as test_load_bench does
def test_a_directly_parametrized_name_is_not_the_fixture(
    request: pytest.FixtureRequest, postgres: bool
) -> None:
    assert _direct_params(request.node) == {"postgres"}
    assert request.node.get_closest_marker("unit") is not None
