"""The dashboard's logs (service/dashboard/logs.py): the driver's log followed by offset (whole lines while
the job runs, the newest part of a long log, a log that started over), each trial's own output, both
scrubbed for a team's key and whole for an admin, 404 for another team, 401 without a session, 503 when
Ray or MLflow cannot answer."""

from __future__ import annotations

from fastapi.testclient import TestClient

from service.dashboard.logs import MAX_CHUNK, log_chunk
from service.engine.rounds import Engine
from tests.service.dashboard_utils import logged_in, sweep
from tests.service.fakes import FakeRay, FakeTracker

SECRET_LINE = "reading /srv/smartune/data/glue/RTE from sqlite:////srv/smartune/mlflow.db on 10.0.3.7\n"


def test_log_chunk_sends_whole_lines_while_running_and_the_rest_once_final() -> None:
    text = "one\ntwo\nthr"
    assert log_chunk(text, 0, final=False) == {
        "text": "one\ntwo\n",
        "offset": 8,
        "skipped": 0,
        "reset": False,
    }
    assert log_chunk(text, 8, final=False)["text"] == ""  # no whole line yet
    assert log_chunk(text, 8, final=True) == {"text": "thr", "offset": 11, "skipped": 0, "reset": False}
    assert log_chunk("new\n", 11, final=False) == {"text": "new\n", "offset": 4, "skipped": 0, "reset": True}


def test_log_chunk_skips_to_a_line_start_within_its_bound() -> None:
    text = "".join(f"line {i:04d}\n" for i in range(100))  # 10 characters a line
    chunk = log_chunk(text, 0, final=False, max_chars=95)
    assert chunk["text"] == "".join(f"line {i:04d}\n" for i in range(91, 100))  # 9 whole lines <= 95
    assert chunk["skipped"] == 910 and chunk["offset"] == len(text)


def test_the_driver_log_is_followed_and_scrubbed_for_a_team(
    client: TestClient, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker, team_key: str
) -> None:
    job_id = sweep(client, engine, fake_ray, fake_tracker, team_key, finish=False)
    fake_ray.set(
        f"{job_id}-a1",
        "RUNNING",
        logs="sweep started\n" + SECRET_LINE + "\x1b[36m(train_trial pid=7)\x1b[0m tri",
    )
    logged_in(client, team_key)
    url = f"/ui/data/jobs/{job_id}/logs"
    first = client.get(url).json()
    assert first["attempt"] == 1 and first["final"] is False
    assert first["text"].startswith("sweep started\nreading <path> from <uri> on <ip>\n")
    assert "tri" not in first["text"].splitlines()[-1]  # the unfinished line waits
    for secret in ("/srv/smartune", "sqlite:", "10.0.3.7"):
        assert secret not in first["text"]
    assert client.get(f"{url}?offset={first['offset']}").json()["text"] == ""
    fake_ray.set(f"{job_id}-a1", "RUNNING", logs="al t001 printed this\n")
    second = client.get(f"{url}?offset={first['offset']}").json()
    assert second["text"] == "(train_trial pid=7) trial t001 printed this\n"  # without Ray's colours

    page = client.get(f"/ui/jobs/{job_id}/logs")
    assert page.status_code == 200 and f'data-url="{url}"' in page.text and 'data-kind="driver"' in page.text
    assert "logs.js" in page.text and "<script>" not in page.text  # no inline script (CSP)


def test_an_admin_reads_the_driver_log_whole_and_a_long_log_is_cut(
    client: TestClient,
    engine: Engine,
    fake_ray: FakeRay,
    fake_tracker: FakeTracker,
    team_key: str,
    admin_key: str,
) -> None:
    job_id = sweep(client, engine, fake_ray, fake_tracker, team_key, finish=False)
    fake_ray.set(f"{job_id}-a1", "RUNNING", logs=SECRET_LINE + "x" * 99 + "\n")
    logged_in(client, admin_key)
    assert client.get(f"/ui/data/jobs/{job_id}/logs").json()["text"].startswith(SECRET_LINE)
    fake_ray.set(f"{job_id}-a1", "RUNNING", logs=("y" * 99 + "\n") * (2 * MAX_CHUNK // 100))
    chunk = client.get(f"/ui/data/jobs/{job_id}/logs").json()
    assert chunk["skipped"] > 0 and len(chunk["text"]) <= MAX_CHUNK
    assert chunk["text"].startswith("y") and chunk["text"].endswith("\n")


def test_a_finished_jobs_log_ends_with_its_last_line_and_bad_asks_are_4xx(
    client: TestClient, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker, team_key: str
) -> None:
    job_id = sweep(client, engine, fake_ray, fake_tracker, team_key)
    fake_ray.set(f"{job_id}-a1", "SUCCEEDED", logs='{"job_id": "x"}')  # the summary, no line break
    logged_in(client, team_key)
    done = client.get(f"/ui/data/jobs/{job_id}/logs").json()
    assert done["final"] is True and done["text"].endswith('{"job_id": "x"}')
    missing = client.get(f"/ui/data/jobs/{job_id}/logs?attempt=2")
    assert missing.status_code == 404 and missing.json()["field"] == "query.attempt"
    assert client.get(f"/ui/data/jobs/{job_id}/logs?offset=-1").status_code == 422
    assert client.get(f"/ui/jobs/{job_id}/logs?attempt=2").status_code == 404
    fake_ray.restart()  # Ray forgot the job
    assert client.get(f"/ui/data/jobs/{job_id}/logs").status_code == 404
    fake_ray.down = True
    assert client.get(f"/ui/data/jobs/{job_id}/logs").status_code == 503


def test_a_trials_output_is_shown_scrubbed_and_only_to_its_team(
    client: TestClient,
    engine: Engine,
    fake_ray: FakeRay,
    fake_tracker: FakeTracker,
    team_key: str,
    other_key: str,
    admin_key: str,
) -> None:
    job_id = sweep(client, engine, fake_ray, fake_tracker, team_key)
    fake_tracker.outputs[(job_id, "t001")] = ["trial t001: start 1\n", "trial t001: start 2\n" + SECRET_LINE]
    url = f"/ui/data/jobs/{job_id}/trials/t001/logs"
    logged_in(client, team_key)
    data = client.get(url).json()
    assert data["starts"] == [1, 2] and data["final"] is True and data["truncated"] is False
    assert "--- start 2 ---\ntrial t001: start 2\nreading <path> from <uri> on <ip>\n" in data["text"]
    assert "/srv/" not in data["text"]
    assert client.get(f"/ui/data/jobs/{job_id}/trials/t002/logs").json()["text"] == ""  # printed nothing
    for bad in ("t999", "..%2Ft001", "%2E%2E"):
        assert client.get(f"/ui/data/jobs/{job_id}/trials/{bad}/logs").status_code == 404, bad
    page = client.get(f"/ui/jobs/{job_id}/logs?trial=t001")
    assert page.status_code == 200 and f'data-url="{url}"' in page.text and 'data-kind="trial"' in page.text
    assert client.get(f"/ui/jobs/{job_id}/logs?trial=t999").status_code == 404
    fake_tracker.down = True
    assert client.get(url).status_code == 503
    fake_tracker.down = False

    logged_in(client, admin_key)
    assert SECRET_LINE in client.get(url).json()["text"]
    logged_in(client, other_key)
    assert client.get(url).status_code == 404
    assert client.get(f"/ui/data/jobs/{job_id}/logs").status_code == 404
    assert client.get(f"/ui/jobs/{job_id}/logs").status_code == 404
    client.cookies.clear()
    assert client.get(url).status_code == 401
    assert client.get(f"/ui/data/jobs/{job_id}/logs").status_code == 401
