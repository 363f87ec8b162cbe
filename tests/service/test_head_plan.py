"""Which Ray head `smartune serve` uses on a host shared by several deployments (service.engine.head_plan):
the one its own run record names, else its own on free ports, its own temp dir and its own token. The probes
are fakes here; tests/integration/test_shared_host.py runs two real deployments side by side."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from service.config import Settings
from service.engine.head_plan import (
    RAY_DEFAULT_PORTS,
    HeadPlan,
    PortTaken,
    deployment_token,
    given_ports,
    own_temp_dir,
    plan_head,
    requested_ports,
)
from service.engine.run_records import RecordedHead, cmdline_of, process_state, recorded_head, run_dir

DEFAULTS = {"--port": 6379, "--dashboard-port": 8265}


def _picker(start: int = 41000) -> Callable[[], int]:
    ports: Iterator[int] = iter(range(start, start + 100))
    return lambda: next(ports)


def _plan(
    data_dir: Path,
    *,
    taken: frozenset[int] | set[int] = frozenset(),
    recorded: RecordedHead | None = None,
    wanted: dict[str, int] | None = None,
    explicit: frozenset[str] = frozenset(),
    temp_dir: Path | None = None,
    ray_answers: bool = True,
    pick_port: Callable[[], int] | None = None,
) -> HeadPlan:
    return plan_head(
        data_dir,
        recorded=recorded,
        wanted=DEFAULTS if wanted is None else wanted,
        explicit=explicit,
        temp_dir=temp_dir,
        port_free=lambda port: port not in taken,
        pick_port=pick_port or _picker(),
        ray_answers=lambda _port: ray_answers,
    )


def test_the_head_this_deployment_recorded_is_reused_and_nothing_is_probed(tmp_path: Path) -> None:
    recorded = RecordedHead(
        pid=4242, address="http://127.0.0.1:41001", record=tmp_path / "run" / "ray-head.json"
    )

    def never(*_args: object) -> bool:
        raise AssertionError("a recorded head needs no port probe")

    plan = plan_head(
        tmp_path,
        recorded=recorded,
        wanted=DEFAULTS,
        explicit=frozenset(),
        temp_dir=None,
        port_free=never,
        pick_port=lambda: int(never()),
        ray_answers=never,
    )
    assert plan.reuse == recorded and plan.address == recorded.address
    assert plan.ports == {} and plan.temp_dir is None
    assert "reusing this deployment's Ray head at http://127.0.0.1:41001 (pid 4242" in plan.said


def test_free_default_ports_are_kept_and_the_temp_dir_is_the_deployments_own(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    assert plan.reuse is None
    assert plan.ports == RAY_DEFAULT_PORTS
    assert plan.address == "http://127.0.0.1:8265"
    assert plan.temp_dir == own_temp_dir(tmp_path)
    assert plan.said.startswith("starting this deployment's Ray head: GCS port 6379")


def test_another_deployments_head_on_the_default_ports_gets_this_one_its_own_ports(tmp_path: Path) -> None:
    """A second `make run` under the same account: the first one's head holds Ray's default ports. It is not
    attached to; this deployment's head takes free ports (distinct ones) and says why."""
    data_dir = tmp_path / "second"
    plan = _plan(data_dir, taken=set(RAY_DEFAULT_PORTS.values()))
    assert plan.reuse is None
    assert sorted(plan.ports.values()) == [41000, 41001, 41002, 41003]
    assert plan.address == f"http://127.0.0.1:{plan.ports['--dashboard-port']}"
    said = plan.said
    assert said.startswith(
        "ports 6379 (GCS), 8265 (dashboard), 10001 (Ray client), 52365 (dashboard agent) are"
    )
    assert f"a Ray head that belongs to another deployment (not started from {data_dir})" in said
    assert f"starting this deployment's own head on GCS port {plan.ports['--port']}" in said
    assert f"temp dir {own_temp_dir(data_dir)}" in said


def test_only_the_taken_ports_move_and_a_picked_port_is_never_one_already_chosen(tmp_path: Path) -> None:
    picks = iter([8265, 6379, 43000])  # the picker offers ports already in the plan first
    plan = _plan(tmp_path, taken={10001}, ray_answers=False, pick_port=lambda: next(picks))
    assert plan.ports == {**RAY_DEFAULT_PORTS, "--ray-client-server-port": 43000}
    assert plan.said.startswith("port 10001 (Ray client) is in use by a program (or a Ray head)")


@pytest.mark.parametrize(
    ("flag", "named"),
    [
        ("--dashboard-port", "SMARTUNE_RAY_DASHBOARD_PORT"),
        ("--port", "SMARTUNE_RAY_HEAD_PORT"),
        ("--ray-client-server-port", "--ray-client-server-port in SMARTUNE_RAY_START_ARGS"),
    ],
)
def test_a_port_the_user_set_is_never_moved_a_taken_one_is_refused_naming_it(
    tmp_path: Path, flag: str, named: str
) -> None:
    wanted = {**DEFAULTS, flag: 9999}
    kept = _plan(tmp_path, wanted=wanted, explicit=frozenset({flag}))
    assert kept.ports[flag] == 9999
    with pytest.raises(PortTaken, match=f"^{named}: port 9999 .* is in use .*RAY_ADDRESS") as refused:
        _plan(tmp_path, wanted=wanted, explicit=frozenset({flag}), taken={9999})
    assert str(tmp_path) in str(refused.value)


def test_a_temp_dir_the_user_gives_is_used(tmp_path: Path) -> None:
    assert _plan(tmp_path, temp_dir=Path("/tmp/x")).temp_dir == Path("/tmp/x")


def test_the_own_temp_dir_falls_back_to_a_short_one_per_data_dir_when_too_long_for_rays_sockets() -> None:
    short = Path("/home/ann/.smartune")
    assert own_temp_dir(short) == short / "ray"
    long_a, long_b = (
        Path("/home/ann/projects/checkout-a/.smartune"),
        Path("/home/ann/projects/checkout-b/.smartune"),
    )
    a, b = own_temp_dir(long_a), own_temp_dir(long_b)
    assert a != b and a == own_temp_dir(long_a)
    assert a.name.startswith("smartune-ray-") and len(str(a)) <= 40


def test_the_ports_in_start_args_are_read_in_both_forms() -> None:
    args = "--object-store-memory=100000000 --ray-client-server-port 4001 --dashboard-agent-listen-port=4002"
    assert given_ports(args) == {"--ray-client-server-port": 4001, "--dashboard-agent-listen-port": 4002}
    assert given_ports("") == {}


def test_a_port_counts_as_set_by_the_user_only_when_given(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SMARTUNE_RAY_HEAD_PORT", "SMARTUNE_RAY_DASHBOARD_PORT"):
        monkeypatch.delenv(name, raising=False)
    assert requested_ports(Settings()) == (DEFAULTS, frozenset())
    monkeypatch.setenv("SMARTUNE_RAY_HEAD_PORT", "7000")
    assert requested_ports(Settings()) == ({"--port": 7000, "--dashboard-port": 8265}, frozenset({"--port"}))
    assert requested_ports(Settings(ray_dashboard_port=8265))[1] == frozenset({"--port", "--dashboard-port"})


def test_each_deployment_makes_its_own_token_once_readable_by_its_user_only(tmp_path: Path) -> None:
    first, env = deployment_token(tmp_path / "a", None, {})
    assert env == {"RAY_AUTH_TOKEN_PATH": str(tmp_path / "a" / "ray-auth-token")}
    assert len(first) == 64 and int(first, 16) >= 0  # 256 bits in hex, as `ray get-auth-token --generate`
    assert stat.S_IMODE(os.stat(env["RAY_AUTH_TOKEN_PATH"]).st_mode) == 0o600
    assert deployment_token(tmp_path / "a", None, {})[0] == first  # kept across starts
    assert deployment_token(tmp_path / "b", None, {})[0] != first  # another deployment: another token


def test_a_token_the_user_gives_wins(tmp_path: Path) -> None:
    assert deployment_token(tmp_path, "given", {}) == ("given", {"RAY_AUTH_TOKEN": "given"})
    path = tmp_path / "shared-token"
    path.write_text("from-file\n")
    environ = {"RAY_AUTH_TOKEN_PATH": str(path)}
    assert deployment_token(tmp_path, None, environ) == ("from-file", {"RAY_AUTH_TOKEN_PATH": str(path)})
    assert not (tmp_path / "ray-auth-token").exists()


def _record(data_dir: Path, pid: int, cmdline: str) -> Path:
    run_dir(data_dir).mkdir(parents=True, exist_ok=True)
    path = run_dir(data_dir) / "ray-head.json"
    path.write_text(json.dumps({"pid": pid, "address": "http://127.0.0.1:41001", "cmdline": cmdline}))
    return path


def test_a_record_names_a_head_only_while_its_pid_runs_the_recorded_command(tmp_path: Path) -> None:
    path = _record(tmp_path, os.getpid(), cmdline_of(os.getpid()))  # this process stands in for the head
    assert recorded_head(tmp_path) == RecordedHead(os.getpid(), "http://127.0.0.1:41001", path)
    _record(tmp_path, os.getpid(), "ray start --head --block")  # the pid now runs something else
    assert recorded_head(tmp_path) is None
    assert not path.exists()  # a stale record is removed: the next start plans its own head


def test_no_or_an_unreadable_record_names_no_head(tmp_path: Path) -> None:
    assert recorded_head(tmp_path) is None
    run_dir(tmp_path).mkdir()
    (run_dir(tmp_path) / "ray-head.json").write_text("{not json")
    assert recorded_head(tmp_path) is None
    assert not (run_dir(tmp_path) / "ray-head.json").exists()


def test_the_state_is_read_after_the_command_name_whatever_it_contains() -> None:
    assert process_state("4242 (python) S 1 4242 4242 0 -1") == "S"
    assert process_state("4242 (a) S (b)) Z 1 4242 4242 0 -1") == "Z"  # a command name with ") S ("
    assert process_state(Path(f"/proc/{os.getpid()}/stat").read_text()) in "RS"  # this process runs
