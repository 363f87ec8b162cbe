"""The client commands take the API key from $SMARTUNE_API_KEY or a file (`--key-file`,
$SMARTUNE_API_KEY_FILE), never from a command-line value, which every user of the machine can read in
`ps`: `--key` is refused with a pointer to those."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import smartune
from cli import client_cmd
from cli.main import build_parser, main

COMMANDS = [["submit", "spec.yaml"], ["jobs"], ["status", "job-x"], ["cancel", "job-x"], ["logs", "job-x"]]


@pytest.fixture(autouse=True)
def no_key_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SMARTUNE_API_KEY", raising=False)
    monkeypatch.delenv("SMARTUNE_API_KEY_FILE", raising=False)


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["jobs", *argv])


def _key_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "key"
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.mark.parametrize("command", COMMANDS)
def test_a_key_on_the_command_line_is_refused_before_any_request(
    command: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_request(_args: argparse.Namespace) -> Any:
        raise AssertionError("a request was made with a key from the command line")

    monkeypatch.setattr(client_cmd, "connect", no_request)
    monkeypatch.setenv("SMARTUNE_API_KEY", "smt_from_env")  # even with a key in the environment
    for flag in (["--key", "smt_secret"], ["--key=smt_secret"]):
        assert main([*command, *flag]) == 2
        err = capsys.readouterr().err
        assert "--key is not accepted" in err and "SMARTUNE_API_KEY" in err and "--key-file" in err
        assert "smt_secret" not in err  # the refusal does not echo the key


def test_the_help_offers_no_key_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["jobs", "--help"])
    out = capsys.readouterr().out
    assert "--key-file" in out and "--key " not in out and "--key KEY" not in out


def test_the_key_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SMARTUNE_API_KEY", " smt_env \n")
    assert client_cmd.api_key(_args()) == "smt_env"


def test_a_key_file_wins_over_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SMARTUNE_API_KEY", "smt_env")
    path = _key_file(tmp_path, "smt_file\n")
    assert client_cmd.api_key(_args("--key-file", str(path))) == "smt_file"


def test_the_key_file_may_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SMARTUNE_API_KEY_FILE", str(_key_file(tmp_path, "smt_file\n")))
    assert client_cmd.api_key(_args()) == "smt_file"


def test_a_bad_key_file_is_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["jobs", "--key-file", str(tmp_path / "missing")]) == 2  # read before any request
    assert "cannot read the key file" in capsys.readouterr().err
    with pytest.raises(client_cmd.ServerError, match="is empty"):
        client_cmd.api_key(_args("--key-file", str(_key_file(tmp_path, "  \n"))))
    with pytest.raises(client_cmd.ServerError, match="no API key"):
        client_cmd.api_key(_args())


def test_a_key_file_others_can_read_gets_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _key_file(tmp_path, "smt_file\n", mode=0o644)
    assert client_cmd.api_key(_args("--key-file", str(path))) == "smt_file"
    assert "readable by others" in capsys.readouterr().err
    path.chmod(0o600)
    client_cmd.api_key(_args("--key-file", str(path)))
    assert capsys.readouterr().err == ""


def test_the_file_key_reaches_the_server(
    client: TestClient, team_key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    """End to end through the test app: the key read from the file is the one the server sees."""
    path = _key_file(tmp_path, team_key + "\n")

    def connect(args: argparse.Namespace) -> smartune.Client:
        return smartune.Client(key=client_cmd.api_key(args), http=client)

    monkeypatch.setattr(client_cmd, "connect", connect)
    assert main(["jobs", "--key-file", str(path)]) == 0
    assert "ID" in capsys.readouterr().out
    bad = _key_file(tmp_path, "smt_000000000000_" + "x" * 43)
    assert main(["jobs", "--key-file", str(bad)]) == 4  # the server refused it
    assert "401" in capsys.readouterr().err
