"""`--json` on the commands that print data (one JSON document on stdout), the read-only views (results,
pool, queue, teams, keys), shell completion, and `python -m cli`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import shtab
import yaml
from fastapi.testclient import TestClient

import smartune
from cli import client_cmd, completion_cmd
from cli.main import main
from service.engine.rounds import Engine
from tests.service.fakes import FakeRay, FakeTracker, summary_for
from tests.service.utils import QUICK_SPEC

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def as_key(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Route the CLI's SDK client into the test app with the key given."""

    def use(key: str) -> None:
        monkeypatch.setattr(client_cmd, "connect", lambda _args: smartune.Client(key=key, http=client))

    return use


def one_document(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)  # the whole of stdout is one document


def test_every_data_command_prints_one_json_document(
    as_key: Any,
    team_key: str,
    admin_key: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    engine: Engine,
    fake_ray: FakeRay,
    fake_tracker: FakeTracker,
) -> None:
    as_key(team_key)
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(QUICK_SPEC))
    submitted = one_document(capsys, "submit", str(spec_file))
    job_id = submitted["id"]
    assert submitted["state"] == "QUEUED" and submitted["replayed"] is False
    assert one_document(capsys, "queue")[0]["job_id"] == job_id
    page = one_document(capsys, "jobs", "--state", "queued")
    assert page["count"] == 1 and page["data"][0]["id"] == job_id
    engine.tick()
    fake_tracker.log_trial(job_id, "t1", "TERMINATED", 0.75, epoch=1)
    fake_tracker.summaries[job_id] = summary_for(job_id)
    fake_ray.set(f"{job_id}-a1", "SUCCEEDED", logs="done\n")
    engine.tick()
    assert one_document(capsys, "status", job_id)["state"] == "SUCCEEDED"
    assert main(["status", job_id, "--watch", "--interval", "0", "--json"]) == 0
    watched = capsys.readouterr()
    assert json.loads(watched.out)["id"] == job_id and f"{job_id} SUCCEEDED" in watched.err  # progress aside
    assert one_document(capsys, "results", job_id)["best"]["value"] == 0.75
    assert one_document(capsys, "pool")["teams"][0]["team"] == "nlp"
    other = one_document(capsys, "submit", str(spec_file), "--idempotency-key", "x")["id"]
    assert one_document(capsys, "cancel", other)["state"] == "CANCELLED"

    as_key(admin_key)
    assert [t["name"] for t in one_document(capsys, "teams")] == ["nlp"]
    keys = one_document(capsys, "keys", "nlp")
    assert [k["team"] for k in keys] == ["nlp"] and all("key" not in k for k in keys)


def test_the_views_print_tables(
    as_key: Any,
    client: TestClient,
    team_key: str,
    admin_key: str,
    capsys: pytest.CaptureFixture[str],
    engine: Engine,
    fake_ray: FakeRay,
    fake_tracker: FakeTracker,
) -> None:
    as_key(team_key)
    sdk = smartune.Client(key=team_key, http=client)
    job_id, waiting = sdk.submit(QUICK_SPEC), sdk.submit(QUICK_SPEC | {"seeds": [2]})
    assert main(["queue"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("POS") and job_id in out and waiting in out
    engine.tick()
    assert main(["pool"]) == 0
    out = capsys.readouterr().out
    assert "capacity  cpus 8  gpus 2" in out and "\nnlp " in out
    fake_tracker.summaries[job_id] = summary_for(job_id)
    fake_ray.set(f"{job_id}-a1", "SUCCEEDED")
    engine.tick()
    assert main(["results", job_id]) == 0
    out = capsys.readouterr().out
    assert (
        "best 0.7500  learning_rate=0.0001" in out and "  2    0.7500    0.0000  learning_rate=0.0001" in out
    )
    assert main(["results", waiting]) == 6  # conflict (cli.exit_codes)
    assert "409: job" in capsys.readouterr().err
    assert main(["retry", job_id]) == 6  # only a FAILED job goes back to the queue
    assert "only a FAILED job can be retried" in capsys.readouterr().err

    as_key(admin_key)
    assert main(["teams"]) == 0
    assert capsys.readouterr().out.startswith("nlp\tgpus=default\tcpus=default\tjobs=default\tweight=1")
    assert main(["keys", "nlp"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("KEY ID") and len(out.splitlines()) == 2
    as_key(team_key)
    assert main(["teams"]) == 4  # unauthorised
    assert "403" in capsys.readouterr().err


def test_admin_list_teams_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    data = str(tmp_path / "data")
    assert main(["admin", "--data-dir", data, "create-team", "nlp", "--gpus", "2", "--no-key"]) == 0
    capsys.readouterr()
    teams = one_document(capsys, "admin", "--data-dir", data, "list-teams")
    assert [(t["name"], t["gpu_quota"]) for t in teams] == [("nlp", 2.0)]


@pytest.mark.parametrize("shell", completion_cmd.SHELLS)
def test_a_completion_script_names_every_command(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    for word in ("submit", "status", "results", "queue", "key-file", "idempotency-key", "completion"):
        assert word in script, word
    for refused in ("--key ", "--key)", "--key'", "-l key "):  # the refused flag is not offered
        assert refused not in script, refused


def test_the_completion_markers_are_shtabs() -> None:
    assert completion_cmd.FILE == shtab.FILE and completion_cmd.DIRECTORY == shtab.DIRECTORY


@pytest.mark.usefixtures("starts_processes")  # bash sources the script
def test_the_bash_script_completes_a_subcommand(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["completion", "bash"]) == 0
    script = tmp_path / "smartune.bash"
    script.write_text(capsys.readouterr().out)
    probe = (
        f'source {script}; COMP_WORDS=(smartune sub); COMP_CWORD=1; _shtab_smartune; echo "${{COMPREPLY[@]}}"'
    )
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout.split() == ["submit"]


@pytest.mark.usefixtures("starts_processes")  # `python -m`
def test_python_dash_m_runs_the_command_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cli", "completion", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0 and done.stdout.startswith("usage: smartune completion"), done.stderr


def test_no_teams_is_said_not_left_blank(capsys: pytest.CaptureFixture[str]) -> None:
    from cli.view_cmd import _teams

    _teams([])
    assert capsys.readouterr().out.startswith("no teams yet: `smartune admin create-team NAME`")
