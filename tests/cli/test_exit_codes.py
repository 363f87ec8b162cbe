"""Every exit status of cli.exit_codes, each produced by a real command against the app (fake Ray), and the
table in docs/cli.md kept equal to the code's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi.testclient import TestClient

import smartune
from cli import client_cmd
from cli.exit_codes import ExitCode, for_error, markdown_table
from cli.main import main
from smartune.errors import ServerUnreachable, SmartuneError
from tests.service.utils import QUICK_SPEC

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def as_key(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    def use(key: str) -> None:
        monkeypatch.setattr(client_cmd, "connect", lambda _args: smartune.Client(key=key, http=client))

    return use


def _through(monkeypatch: pytest.MonkeyPatch, handler: Callable[[httpx.Request], httpx.Response]) -> None:
    """The CLI's client talks to `handler` instead of a server (no socket)."""
    transport = httpx.MockTransport(handler)

    def client(_args: Any) -> smartune.Client:
        return smartune.Client(url="http://smartune.test", key="smt_x", transport=transport, retries=0)

    monkeypatch.setattr(client_cmd, "connect", client)


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(QUICK_SPEC))
    return path


def test_ok_and_a_job_that_did_not_succeed(
    as_key: Callable[[str], None], team_key: str, spec_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    as_key(team_key)
    assert main(["submit", str(spec_file)]) == ExitCode.OK == 0
    job_id = capsys.readouterr().out.strip()
    assert main(["status", job_id]) == ExitCode.OK
    assert main(["cancel", job_id]) == ExitCode.OK
    assert main(["status", job_id, "--watch", "--interval", "0"]) == ExitCode.JOB_NOT_SUCCEEDED == 1


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as parsed:
        main(["status"])  # argparse: a missing argument
    assert parsed.value.code == ExitCode.USAGE == 2
    assert main(["submit", str(tmp_path / "missing.yaml")]) == ExitCode.USAGE
    assert "missing.yaml" in capsys.readouterr().err


def test_refusals_by_status(
    as_key: Callable[[str], None],
    team_key: str,
    spec_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    as_key("smt_not_a_key")
    assert main(["jobs"]) == ExitCode.UNAUTHORISED == 4  # 401
    as_key(team_key)
    assert main(["teams"]) == ExitCode.UNAUTHORISED  # 403: an admin's call
    assert main(["status", "job-nope"]) == ExitCode.NOT_FOUND == 5
    assert main(["submit", str(spec_file)]) == ExitCode.OK
    job_id = capsys.readouterr().out.strip()
    assert main(["retry", job_id]) == ExitCode.CONFLICT == 6  # only a FAILED job is retried
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: mars\n")
    assert main(["submit", str(bad)]) == ExitCode.REJECTED == 7
    err = capsys.readouterr().err
    assert "409" in err and "422: task:" in err


def test_no_server_and_a_broken_server(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    _through(monkeypatch, refuse)
    assert main(["jobs"]) == ExitCode.UNREACHABLE == 8
    assert "cannot reach the server" in capsys.readouterr().err
    _through(monkeypatch, lambda _request: httpx.Response(500, json={"detail": "internal error"}))
    assert main(["jobs"]) == ExitCode.SERVER_ERROR == 9
    _through(monkeypatch, lambda _request: httpx.Response(503, json={"detail": "database down"}))
    assert main(["jobs"]) == ExitCode.SERVER_ERROR


def test_interrupted(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt(_args: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(client_cmd, "connect", interrupt)
    monkeypatch.setenv("SMARTUNE_API_KEY", "smt_x")
    assert main(["jobs"]) == ExitCode.INTERRUPTED == 130


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (SmartuneError(401, "no key"), ExitCode.UNAUTHORISED),
        (SmartuneError(403, "not yours"), ExitCode.UNAUTHORISED),
        (SmartuneError(404, "no job"), ExitCode.NOT_FOUND),
        (SmartuneError(409, "not FAILED"), ExitCode.CONFLICT),
        (SmartuneError(422, "task: unknown"), ExitCode.REJECTED),
        (SmartuneError(413, "too large"), ExitCode.REJECTED),
        (SmartuneError(429, "slow down"), ExitCode.REJECTED),
        (SmartuneError(500, "bug"), ExitCode.SERVER_ERROR),
        (SmartuneError(503, "database down"), ExitCode.SERVER_ERROR),
        (ServerUnreachable("no answer"), ExitCode.UNREACHABLE),
        (SmartuneError(None, "the key file is empty"), ExitCode.USAGE),
        (ValueError("bad flag"), ExitCode.USAGE),
        (FileNotFoundError("spec.yaml"), ExitCode.USAGE),
    ],
)
def test_each_error_maps_to_its_code(error: BaseException, code: ExitCode) -> None:
    assert for_error(error) is code


def test_the_codes_are_distinct_and_documented() -> None:
    assert len({c.value for c in ExitCode}) == len(ExitCode)
    documented = (ROOT / "docs" / "cli.md").read_text()
    assert markdown_table() in documented, "docs/cli.md is stale: python -m cli.exit_codes prints its table"
