"""The CLI: `smartune admin` on the store directly; the client commands against the app (fake Ray)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

import smartune
from cli import client_cmd
from cli.main import main
from service.engine.rounds import Engine
from tests.service.fakes import FakeRay, FakeTracker, summary_for, summary_line
from tests.service.utils import QUICK_SPEC, submit


def test_admin_creates_teams_and_keys_on_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    data = str(tmp_path / "data")
    created = ["create-team", "nlp", "--gpus", "2", "--cpus", "6", "--max-jobs", "3", "--max-priority", "5"]
    mounted_later = ["--data-root", "/srv/nlp", "--force"]  # a root that does not exist here
    assert main(["admin", "--data-dir", data, *created, *mounted_later]) == 0
    out = capsys.readouterr()
    team_key = out.out.strip()
    assert team_key.startswith("smt_") and out.out == team_key + "\n"  # the key alone on stdout
    assert main(["admin", "--data-dir", data, "create-key", "nlp"]) == 0
    assert capsys.readouterr().out.strip().startswith("smt_")
    assert main(["admin", "--data-dir", data, "create-key", "--admin"]) == 0
    admin_key = capsys.readouterr().out.strip()
    assert main(["admin", "--data-dir", data, "create-team", "nlp"]) == 2
    assert "exists already" in capsys.readouterr().err
    assert main(["admin", "--data-dir", data, "create-key", "nobody"]) == 2
    assert main(["admin", "--data-dir", data, "list-teams"]) == 0
    listed = capsys.readouterr().out
    assert "nlp\tgpus=2\tcpus=6\tjobs=3\tweight=1\tpriority=0\tmax_priority=5\troots=/srv/nlp" in listed
    assert main(["admin", "--data-dir", data, "create-team", "cv", "--data-root", "relative"]) == 2
    assert "absolute" in capsys.readouterr().err

    from service.config import Settings
    from service.store import crud
    from service.store.db import connect

    db = connect(Settings(data_dir=data).sqlalchemy_url)
    with db.sessions() as session:
        team_row = crud.authenticate(session=session, key=team_key)
        admin_row = crud.authenticate(session=session, key=admin_key)
        assert team_row is not None and team_row.team is not None and team_row.team.gpu_quota == 2
        assert admin_row is not None and admin_row.is_admin and admin_row.team is None
    key_id = team_key.split("_")[1]
    assert main(["admin", "--data-dir", data, "revoke-key", key_id]) == 0
    with db.sessions() as session:
        assert crud.authenticate(session=session, key=team_key) is None


@pytest.fixture
def cli(client: TestClient, team_key: str, monkeypatch: Any) -> TestClient:
    """Route the CLI's SDK client into the test app."""
    monkeypatch.setattr(client_cmd, "connect", lambda _args: smartune.Client(key=team_key, http=client))
    return client


def test_submit_jobs_status_cancel_logs(
    cli: TestClient, tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: Engine, fake_ray: FakeRay
) -> None:
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(QUICK_SPEC))
    assert main(["submit", str(spec_file), "--idempotency-key", "once"]) == 0
    out = capsys.readouterr()
    job_id = out.out.strip()
    assert job_id.startswith("job-") and "QUEUED: 2 trials" in out.err
    assert main(["submit", str(spec_file), "--idempotency-key", "once"]) == 0
    assert capsys.readouterr().out.strip() == job_id

    assert main(["jobs"]) == 0
    listing = capsys.readouterr().out
    assert job_id in listing and "QUEUED" in listing

    engine.tick()
    fake_ray.set(f"{job_id}-a1", "SUCCEEDED", logs="epoch 1\n" + summary_line(job_id))
    engine.tick()
    assert main(["status", job_id, "--watch", "--interval", "0"]) == 0
    status = capsys.readouterr().out
    assert f"{job_id} SUCCEEDED" in status and "best 0.7500" in status

    assert main(["logs", job_id, "--tail", "2"]) == 0
    assert capsys.readouterr().out.startswith("epoch 1\n")

    second = tmp_path / "second.json"
    second.write_text('{"task": "rte", "model": "tiny-random", "seeds": [7]}')
    assert main(["submit", str(second)]) == 0
    other = capsys.readouterr().out.strip()
    assert main(["cancel", other]) == 0
    assert capsys.readouterr().out.strip() == f"{other} CANCELLED"
    assert main(["status", other, "--watch", "--interval", "0"]) == 1  # ended, but not SUCCEEDED
    assert "smartune retry" not in capsys.readouterr().out  # a cancelled job cannot be retried

    assert main(["submit", str(second), "--idempotency-key", "third"]) == 0
    third = capsys.readouterr().out.strip()
    engine.tick()
    fake_ray.set(f"{third}-a1", "FAILED", message="the node died")
    engine.tick()
    assert main(["status", third]) == 0
    assert (
        f"the node died\n  resume it from its checkpoints: smartune retry {third}" in capsys.readouterr().out
    )
    assert main(["retry", third]) == 0
    assert capsys.readouterr().out.strip() == f"{third} QUEUED"


def test_client_errors_are_one_line(
    cli: TestClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: mars\n")
    assert main(["submit", str(bad)]) == 7  # rejected (cli.exit_codes)
    assert "422: task:" in capsys.readouterr().err
    assert main(["status", "job-nope"]) == 5  # not found
    assert "404: job 'job-nope' not found" in capsys.readouterr().err
    assert main(["submit", str(tmp_path / "missing.yaml")]) == 2


def test_no_key_and_no_server(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any) -> None:
    monkeypatch.delenv("SMARTUNE_API_KEY", raising=False)
    assert main(["jobs"]) == 2
    assert "no API key" in capsys.readouterr().err
    monkeypatch.setenv("SMARTUNE_API_KEY", "smt_x")
    assert main(["jobs", "--url", "http://127.0.0.1:9"]) == 8  # unreachable
    assert "cannot reach the server" in capsys.readouterr().err


def test_audit_queues_waits_and_prints_the_verdict(
    cli: TestClient,
    team_key: str,
    capsys: pytest.CaptureFixture[str],
    engine: Engine,
    fake_ray: FakeRay,
    fake_tracker: FakeTracker,
) -> None:
    """`smartune audit JOB --wait` queues the audit, follows it while the engine runs it (a thread plays
    Ray: the audit's driver prints its report) and exits 0 on PASS; `--list` shows it."""
    job_id = submit(cli, team_key)["id"]
    engine.tick()
    fake_tracker.log_trial(job_id, "t1", "TERMINATED", 0.7, epoch=1)
    fake_tracker.summaries[job_id] = summary_for(job_id, 0.7)
    fake_ray.set(f"{job_id}-a1", "SUCCEEDED", logs="done\n")
    engine.tick()

    def play_ray() -> None:
        for _ in range(500):
            engine.tick()
            audits = [s for s in fake_ray.submissions if not s.startswith(job_id)]
            if audits:
                audit_id = audits[0].rsplit("-a", 1)[0]
                trial = {"run_id": "r", "verdict": "PASS", "reason": "12 metric values match exactly"}
                report = {"job_id": audit_id, "audit_of": job_id, "verdict": "PASS", "trials": [trial]}
                fake_ray.set(audits[0], "SUCCEEDED", logs=json.dumps(report))
                engine.tick()
                return
            time.sleep(0.02)

    player = threading.Thread(target=play_ray)
    player.start()
    code = main(["audit", job_id, "--wait", "--interval", "0.05"])
    player.join()
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("PASS") and "12 metric values match exactly" in out
    assert main(["audit", job_id, "--list", "--json"]) == 0
    assert [a["state"] for a in json.loads(capsys.readouterr().out)] == ["SUCCEEDED"]
