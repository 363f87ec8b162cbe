"""`smartune data push | list | show | publish | delete` against the app (fake Ray), through the SDK."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import smartune
from cli import client_cmd
from cli.main import main
from tests.service.dataset_utils import expected_digest, rte_files, rte_tsv


@pytest.fixture
def cli(client: TestClient, team_key: str, admin_key: str, monkeypatch: Any) -> dict[str, str]:
    """The CLI talks to the test app; `as_admin()` switches it to the admin key."""
    keys = {"key": team_key}
    monkeypatch.setattr(client_cmd, "connect", lambda _args: smartune.Client(key=keys["key"], http=client))
    keys["admin"] = admin_key
    return keys


@pytest.fixture
def rte_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "RTE"
    folder.mkdir()
    for name, data in rte_files().items():
        (folder / name).write_bytes(data)
    (folder / "test.tsv").write_text("index\tsentence1\tsentence2\n0\ta\tb\n")  # GLUE's: no labels
    (folder / "README").write_text("not data")
    return folder


def test_push_a_folder_then_list_and_show_it(
    cli: dict[str, str], rte_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["data", "push", str(rte_folder), "--name", "tiny-rte", "--task", "rte"]) == 0
    out = capsys.readouterr()
    digest = expected_digest(rte_files())
    assert "tiny-rte@1 (new version)" in out.out and f"data: dataset:sha256:{digest}" in out.out
    assert "rows: train 8, dev 4" in out.out
    assert "skipped test.tsv" in out.err and "skipped README" in out.err
    assert "push tiny-rte" in out.err and "100%" in out.err  # the progress bar, on stderr
    assert (
        main(["data", "push", str(rte_folder), "--name", "tiny-rte", "--task", "rte", "--no-progress"]) == 0
    )
    out = capsys.readouterr()
    assert "unchanged" in out.out and "100%" not in out.err
    assert main(["data", "list", "--json"]) == 0
    assert [d["digest"] for d in json.loads(capsys.readouterr().out)] == [digest]
    assert main(["data", "show", "tiny-rte@1"]) == 0
    shown = capsys.readouterr().out
    assert "tiny-rte@1" in shown and "train.tsv" in shown and "sha256" in shown
    assert main(["data", "show", "tiny-rte", "--json"]) == 0
    assert [v["version"] for v in json.loads(capsys.readouterr().out)["data"]] == [1]
    cli["key"] = cli["admin"]
    assert main(["data", "publish", "tiny-rte@1"]) == 0
    assert "published to every team" in capsys.readouterr().out


def test_push_a_single_file_and_refusals_are_one_line(
    cli: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train = tmp_path / "train.tsv"
    train.write_bytes(rte_tsv(4) + b"4\ta\tb\tmaybe\n")
    rejected = 7  # cli.exit_codes.ExitCode.REJECTED: the server's 422
    assert main(["data", "push", str(train), "--name", "x", "--task", "rte", "--no-progress"]) == rejected
    err = capsys.readouterr().err
    assert "train.tsv line 6, column 'label'" in err and len(err.strip().splitlines()) == 1
    assert main(["data", "push", str(tmp_path / "none"), "--name", "x", "--task", "rte"]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    assert main(["data", "show", "x@zero"]) == 2
    assert main(["data", "delete", "x"]) == 2
    assert "NAME@VERSION" in capsys.readouterr().err
    assert main(["data", "show", "nothing"]) == 5  # not found
    assert "not found" in capsys.readouterr().err
