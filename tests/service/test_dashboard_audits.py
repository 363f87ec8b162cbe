"""Audits in the dashboard: the job page's button queues one (service.audits, as the REST route), the
audit's page follows it to its report (verdict, differing metrics first, provenance drift), the job page
lists its audits; another team can neither see nor start one."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from service.engine.rounds import Engine
from tests.service.dashboard_utils import csrf_of, logged_in, sweep
from tests.service.fakes import FakeRay, FakeTracker


def _report(audit_id: str, job_id: str) -> str:
    metrics = [
        {"epoch": 1, "metric": "score", "recorded": 0.5, "rerun": 0.5, "match": True},
        {"epoch": 2, "metric": "eval_accuracy", "recorded": 0.5, "rerun": 0.53125, "match": False},
    ]
    provenance = [
        {"field": "torch_version", "recorded": "2.13.0+cpu", "now": "2.13.0+cpu", "same": True},
        {"field": "seed", "recorded": "1", "now": "4", "same": False},
    ]
    trial = {"run_id": "run-x", "epochs": 2, "tolerance": 0.0, "exact": True, "verdict": "FAIL",
             "reason": "eval_accuracy at epoch 2: recorded 0.5, re-run 0.53125", "metrics": metrics,
             "provenance": provenance}  # fmt: skip
    return json.dumps({"job_id": audit_id, "audit_of": job_id, "verdict": "FAIL", "trials": [trial]})


def test_the_job_page_audits_the_best_trial_and_shows_the_report(
    client: TestClient, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker, team_key: str
) -> None:
    job_id = sweep(client, engine, fake_ray, fake_tracker, team_key)
    logged_in(client, team_key)
    page = client.get(f"/ui/jobs/{job_id}").text
    assert "Audit the best trial" in page
    assert client.post(f"/ui/jobs/{job_id}/audit", data={"csrf": "wrong"}).status_code == 403
    queued = client.post(f"/ui/jobs/{job_id}/audit", data={"csrf": csrf_of(page)}, follow_redirects=False)
    assert queued.status_code == 303
    audit_url = queued.headers["location"]
    audit_id = audit_url.rsplit("/", 1)[1]
    waiting = client.get(audit_url).text
    assert (
        "QUEUED" in waiting and 'http-equiv="refresh"' in waiting and f'href="/ui/jobs/{job_id}"' in waiting
    )

    engine.tick()
    fake_ray.set(f"{audit_id}-a1", "SUCCEEDED", logs=_report(audit_id, job_id))
    engine.tick()
    done = client.get(audit_url).text
    assert "verdict-FAIL" in done and 'http-equiv="refresh"' not in done
    assert done.index("eval_accuracy") < done.index("<td>score</td>")  # the difference comes first
    assert "1 differing" in done and "(1 differ)" in done
    listed = client.get(f"/ui/jobs/{job_id}").text
    assert f'href="/ui/jobs/{audit_id}"' in listed and "verdict-FAIL" in listed
    # the jobs list: the audit's row shows its verdict, not "0 / 1" trials and no best value
    row = client.get("/ui/jobs").text.split(f'data-job="{audit_id}"')[1].split("</tr>")[0]
    assert 'data-kind="audit"' in row and '<span class="verdict verdict-FAIL">FAIL</span>' in row
    assert "0 / 1" not in row and '<td data-field="trials">audit</td>' in row
    assert "0 / 0" not in row and '<span data-field="epochs-text">–</span>' in row  # no epochs of its own
    live = {j["id"]: j for j in client.get("/ui/data/jobs").json()["jobs"]}
    assert live[audit_id]["verdict"] == "FAIL" and live[audit_id]["kind"] == "audit"
    assert live[job_id]["verdict"] is None and live[job_id]["kind"] == "sweep"


def test_another_team_cannot_see_or_start_an_audit(
    client: TestClient,
    engine: Engine,
    fake_ray: FakeRay,
    fake_tracker: FakeTracker,
    team_key: str,
    other_key: str,
) -> None:
    job_id = sweep(client, engine, fake_ray, fake_tracker, team_key)
    logged_in(client, team_key)
    page = client.get(f"/ui/jobs/{job_id}").text
    audit_url = client.post(
        f"/ui/jobs/{job_id}/audit", data={"csrf": csrf_of(page)}, follow_redirects=False
    ).headers["location"]
    logged_in(client, other_key)
    token = csrf_of(client.get("/ui/jobs").text)
    assert client.get(audit_url).status_code == 404
    assert client.post(f"/ui/jobs/{job_id}/audit", data={"csrf": token}).status_code == 404


def test_a_running_job_offers_no_audit(
    client: TestClient, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker, team_key: str
) -> None:
    job_id = sweep(client, engine, fake_ray, fake_tracker, team_key, finish=False)
    logged_in(client, team_key)
    page = client.get(f"/ui/jobs/{job_id}").text
    assert "Audit the best trial" not in page
    refused = client.post(f"/ui/jobs/{job_id}/audit", data={"csrf": csrf_of(page)})
    assert refused.status_code == 409 and "SUCCEEDED" in refused.text
