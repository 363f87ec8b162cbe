"""The dashboard's pages: the jobs list (filters, text, pagination, progress), the job page (timeline,
spec, best configuration, MLflow links, cancel and re-submit through the service's job operations), the
pool, compare, team isolation (admins see every team) and clear 4xx pages for bad input."""

from __future__ import annotations

import yaml
from fastapi.testclient import TestClient

from service.engine.rounds import Engine
from tests.service.dashboard_utils import csrf_of, logged_in, sweep
from tests.service.fakes import FakeRay, FakeTracker, summary_for
from tests.service.utils import spec, submit


def test_the_jobs_list_filters_by_state_and_text_and_pages(client: TestClient, team_key: str) -> None:
    ids = [submit(client, team_key, spec(name=f"run-{i}"))["id"] for i in range(27)]
    logged_in(client, team_key)
    first = client.get("/ui/jobs")
    assert first.status_code == 200 and "27 in all" in first.text and "page 1 of 2" in first.text
    assert ids[-1] in first.text and ids[0] not in first.text  # newest first, 25 a page
    second = client.get("/ui/jobs?page=2")
    assert ids[0] in second.text and ids[1] in second.text and 'rel="prev"' in second.text
    assert client.get("/ui/jobs?page=3").status_code == 404
    by_text = client.get("/ui/jobs?q=run-13")
    assert "1 in all" in by_text.text and ids[13] in by_text.text
    assert "0 in all" in client.get("/ui/jobs?state=RUNNING").text
    assert "27 in all" in client.get("/ui/jobs?state=QUEUED&q=RUN-").text  # case-insensitive
    assert "0 in all" in client.get("/ui/jobs?q=%25").text  # % is literal


def test_bad_list_input_is_a_4xx_page(client: TestClient, team_key: str) -> None:
    logged_in(client, team_key)
    for url in (
        "/ui/jobs?state=NOPE",
        "/ui/jobs?page=0",
        "/ui/jobs?page=x",
        "/ui/jobs?q=" + "a" * 201,
        "/ui/jobs?q=%00",
    ):
        assert client.get(url).status_code == 422, url
    missing = client.get("/ui/jobs/job-nope")
    assert missing.status_code == 404 and "text/html" in missing.headers["content-type"]
    assert "not found" in missing.text


def test_the_job_page_shows_timeline_spec_best_and_links(
    client: TestClient, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker, team_key: str
) -> None:
    job_id = sweep(client, engine, fake_ray, fake_tracker, team_key)
    logged_in(client, team_key)
    page = client.get(f"/ui/jobs/{job_id}").text
    detail = client.get(f"/api/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {team_key}"}).json()
    assert "SUCCEEDED" in page and detail["spec_hash"] in page
    for transition in detail["transitions"]:
        assert transition["reason"].split(";")[0][:30] in page.replace("&#39;", "'")
    assert page.count('name="trial"') == 8
    assert "http://mlflow.test/#/experiments/1/runs/run-" in page
    assert 'data-smart="1"' in page and 'id="chart-regularizer"' in page
    # the best cell (lr 1e-4, any batch size: mean over 2 seeds) and a spec that re-runs it
    best = yaml.safe_load(
        page.split('id="best-spec" class="spec">')[1].split("</pre>")[0].replace("&#39;", "'")
    )
    axes = best["search_space"]["axes"]
    assert axes["learning_rate"]["values"] == [1e-4] and len(axes["batch_size"]["values"]) == 1
    assert best["seeds"] == [1, 2] and "seed" not in axes
    resubmitted = client.post("/api/v1/jobs", json=best, headers={"Authorization": f"Bearer {team_key}"})
    assert resubmitted.status_code == 201, resubmitted.text
    # the timeline reads as text: "sweep finished: 2 TERMINATED", not a Python dict
    finished = [t["reason"] for t in detail["transitions"] if t["to_state"] == "SUCCEEDED"]
    assert (
        finished == ["sweep finished: 2 TERMINATED"]
        and "{" not in page.split("<h2>Timeline")[1].split("</section>")[0]
    )


def test_a_best_cell_of_one_seed_says_its_std_is_undefined(
    client: TestClient, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker, team_key: str
) -> None:
    job_id = sweep(client, engine, fake_ray, fake_tracker, team_key, seeds=(1,))
    logged_in(client, team_key)
    page = client.get(f"/ui/jobs/{job_id}").text
    best = page.split("<h2>Best configuration</h2>")[1].split("</p>")[0]
    assert "(n = 1, no std)" in best and "±" not in best


def test_a_queued_job_has_its_charts_waiting_for_the_first_epoch(client: TestClient, team_key: str) -> None:
    body = spec(search_space={"axes": {"learning_rate": {"type": "grid", "values": [1e-5, 1e-4]},
                                       "lambda_s": {"type": "grid", "values": [1.0, 3.0]}}}, method="smart")  # fmt: skip
    job_id = submit(client, team_key, body)["id"]
    logged_in(client, team_key)
    page = client.get(f"/ui/jobs/{job_id}").text
    # no trial yet: the spec's grid still gives the heat map and parallel coordinates their places, and
    # a SMART sweep its regulariser chart, each drawn as "waiting for the first epoch" by job.js
    for chart in ("chart-score", "chart-loss", "chart-heatmap", "chart-parallel", "chart-regularizer"):
        assert f'id="{chart}"' in page, chart
    assert "<option selected>lambda_s</option>" in page


def test_cancel_and_resubmit_go_through_the_job_operations(
    client: TestClient, engine: Engine, fake_ray: FakeRay, team_key: str
) -> None:
    job_id = submit(client, team_key)["id"]
    engine.tick()
    logged_in(client, team_key)
    page = client.get(f"/ui/jobs/{job_id}").text
    token = page.split('name="token" value="')[1].split('"')[0]
    assert client.post(f"/ui/jobs/{job_id}/cancel", data={"csrf": "wrong"}).status_code == 403
    cancelled = client.post(f"/ui/jobs/{job_id}/cancel", data={"csrf": csrf_of(page)}, follow_redirects=False)
    assert cancelled.status_code == 303 and cancelled.headers["location"] == f"/ui/jobs/{job_id}"
    assert f"{job_id}-a1" in fake_ray.stopped
    assert "CANCELLED" in client.get(f"/ui/jobs/{job_id}").text
    again = client.post(f"/ui/jobs/{job_id}/cancel", data={"csrf": csrf_of(page)})
    assert again.status_code == 200  # cancelling a cancelled job is a no-op, as in the API
    form = {"csrf": csrf_of(page), "token": token}
    first = client.post(f"/ui/jobs/{job_id}/resubmit", data=form, follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"] != f"/ui/jobs/{job_id}"
    double = client.post(f"/ui/jobs/{job_id}/resubmit", data=form, follow_redirects=False)
    assert double.headers["location"] == first.headers["location"]  # the form token: one job per click
    listed = client.get("/api/v1/jobs", headers={"Authorization": f"Bearer {team_key}"}).json()
    assert listed["count"] == 2


def test_a_failed_job_has_a_retry_button_that_queues_its_next_attempt(
    client: TestClient, engine: Engine, fake_ray: FakeRay, team_key: str, other_key: str
) -> None:
    job_id = submit(client, team_key)["id"]
    engine.tick()
    logged_in(client, team_key)
    assert (
        f"/ui/jobs/{job_id}/retry" not in client.get(f"/ui/jobs/{job_id}").text
    )  # running: nothing to retry
    fake_ray.set(f"{job_id}-a1", "FAILED", message="the node went away")
    engine.tick()
    page = client.get(f"/ui/jobs/{job_id}").text
    assert f'action="/ui/jobs/{job_id}/retry"' in page
    assert client.post(f"/ui/jobs/{job_id}/retry", data={"csrf": "wrong"}).status_code == 403
    retried = client.post(f"/ui/jobs/{job_id}/retry", data={"csrf": csrf_of(page)}, follow_redirects=False)
    assert retried.status_code == 303 and retried.headers["location"] == f"/ui/jobs/{job_id}"
    job = client.get(f"/api/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {team_key}"}).json()
    assert job["state"] == "QUEUED" and job["transitions"][-1]["reason"].startswith("retried by key ")
    again = client.post(f"/ui/jobs/{job_id}/retry", data={"csrf": csrf_of(page)})
    assert again.status_code == 409 and "only a FAILED job can be retried" in again.text  # an error page
    engine.tick()
    assert fake_ray.submissions[-1] == f"{job_id}-a2"
    logged_in(client, other_key)
    other = client.post(f"/ui/jobs/{job_id}/retry", data={"csrf": csrf_of(client.get("/ui/jobs").text)})
    assert other.status_code == 404  # another team's job does not exist for it


def test_another_team_sees_nothing_and_admins_see_all(
    client: TestClient,
    engine: Engine,
    fake_ray: FakeRay,
    fake_tracker: FakeTracker,
    team_key: str,
    other_key: str,
    admin_key: str,
) -> None:
    job_id = sweep(client, engine, fake_ray, fake_tracker, team_key)
    logged_in(client, other_key)
    assert job_id not in client.get("/ui/jobs").text
    for url in (
        f"/ui/jobs/{job_id}",
        f"/ui/data/jobs/{job_id}/status",
        f"/ui/data/jobs/{job_id}/curves?key=score",
        f"/ui/data/jobs/{job_id}/heatmap?x=learning_rate&y=batch_size",
        f"/ui/data/jobs/{job_id}/parallel",
        f"/ui/compare?job={job_id}&trial=t001&trial=t002",
    ):
        assert client.get(url).status_code == 404, url
    token = csrf_of(client.get("/ui/jobs").text)
    assert client.post(f"/ui/jobs/{job_id}/cancel", data={"csrf": token}).status_code == 404
    assert (
        client.post(f"/ui/jobs/{job_id}/resubmit", data={"csrf": token, "token": "t" * 12}).status_code == 404
    )
    logged_in(client, admin_key)
    assert job_id in client.get("/ui/jobs").text
    page = client.get(f"/ui/jobs/{job_id}").text
    assert "Re-submitting needs a key of team nlp" in page  # admins have no team to submit as


def test_the_pool_page_reuses_the_pool_api(client: TestClient, team_key: str, other_key: str) -> None:
    submit(client, team_key)
    other_job = submit(client, other_key)["id"]
    logged_in(client, team_key)
    page = client.get("/ui/pool")
    assert page.status_code == 200 and "Usage by team" in page.text
    assert "nlp" in page.text and "vision" not in page.text and other_job not in page.text
    assert "another team's" in page.text and "<meter" in page.text


def test_compare_marks_differing_parameters(
    client: TestClient, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker, team_key: str
) -> None:
    job_id = sweep(client, engine, fake_ray, fake_tracker, team_key)
    logged_in(client, team_key)
    page = client.get(f"/ui/compare?job={job_id}&trial=t001&trial=t002")
    assert page.status_code == 200
    rows = {r.split("<th>")[1].split("</th>")[0]: r for r in page.text.split("<tr")[1:] if "<th>" in r}
    assert 'class="differs"' in rows["seed"] and 'class="differs"' not in rows["learning_rate"]
    assert client.get(f"/ui/compare?job={job_id}&trial=t001").status_code == 422
    assert client.get(f"/ui/compare?job={job_id}&trial=t001&trial=t001").status_code == 422
    six = "".join(f"&trial=t00{i}" for i in range(1, 7))
    assert client.get(f"/ui/compare?job={job_id}{six}").status_code == 422
    assert client.get(f"/ui/compare?job={job_id}&trial=t001&trial=zzz").status_code == 404
    assert client.get("/ui/compare?trial=t001&trial=t002").status_code == 422


def test_the_static_files_are_served_with_their_version(client: TestClient) -> None:
    plotly = client.get("/ui/static/vendor/plotly.min.js")
    assert plotly.status_code == 200 and plotly.headers["content-encoding"] == "gzip"
    assert plotly.text.startswith("/**\n* plotly.js v")
    again = client.get("/ui/static/vendor/plotly.min.js", headers={"If-None-Match": plotly.headers["etag"]})
    assert again.status_code == 304
    assert client.get("/ui/static/job.js").status_code == 200
    for bad in ("/ui/static/..%2Fdashboard%2Fauth.py", "/ui/static/nope.js", "/ui/static/.hidden.css"):
        assert client.get(bad).status_code == 404, bad


def test_a_paper_preset_shows_the_papers_number_beside_ours(
    client: TestClient, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker, team_key: str
) -> None:
    body = spec(search_space={"preset": "smart-ablation"}, seeds=[1, 2])
    job_id = submit(client, team_key, body)["id"]
    engine.tick()
    fake_ray.set(f"{job_id}-a1", "RUNNING")
    means = {
        "vanilla": 0.60,
        "smart": 0.66,
        "smart-breg-only": 0.64,
        "smart-rs-only": 0.65,
        "smart-renorm": 0.62,
    }
    for i, (method, mean) in enumerate(means.items()):
        for seed in (1, 2):
            score = mean + (0.01 if seed == 1 else -0.01)
            fake_tracker.log_trial(
                job_id, f"t{i}{seed}", "TERMINATED", score, epoch=1, params={"method": method, "seed": seed}
            )
    engine.tick()
    logged_in(client, team_key)
    page = client.get(f"/ui/jobs/{job_id}").text
    section = page.split('id="paper"')[1].split("</section>")[0]
    assert "Table 3" in section and "Jiang" in section and "rte accuracy" in section
    rows = {r.split("<th>")[1].split("</th>")[0]: r for r in section.split("<tr>")[2:]}
    assert "<td>71.2</td><td>66</td><td>2</td>" in rows["SMART"]  # paper, ours (best cell mean, %), n
    assert "<td>63.5</td><td>60</td>" in rows["BERT"]
    assert "70.8" in rows["−R_s (λ_s = 0)"] and "64" in rows["−R_s (λ_s = 0)"]
    assert len(rows) == 4  # renorm is not in the paper's table
    plain = client.get(f"/ui/jobs/{submit(client, team_key)['id']}").text
    assert 'id="paper"' not in plain  # no preset, no paper column


def test_a_multitask_job_shows_each_task_live_then_with_its_registered_model(
    client: TestClient, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker, team_key: str
) -> None:
    body = spec(
        task=["rte", "stsb"], multitask={"sampling": "round-robin", "finetune_epochs": 1}, seeds=[1, 2]
    )
    job_id = submit(client, team_key, body)["id"]
    engine.tick()
    fake_ray.set(f"{job_id}-a1", "RUNNING")
    for trial, seed, rte, stsb in (("t1", 1, 0.61, 0.70), ("t2", 2, 0.58, 0.74)):
        metrics = {"tasks/rte/best_score": rte, "tasks/rte/best_stage": 1.0, "tasks/rte/best_epoch": 1.0,
                   "tasks/stsb/best_score": stsb, "tasks/stsb/best_stage": 0.0, "tasks/stsb/best_epoch": 2.0}  # fmt: skip
        fake_tracker.log_trial(job_id, trial, "RUNNING", (rte + stsb) / 2, epoch=3, params={"seed": seed},
                               metrics=metrics)  # fmt: skip
    engine.tick()
    logged_in(client, team_key)

    def rows() -> dict[str, str]:
        section = client.get(f"/ui/jobs/{job_id}").text.split('id="tasks"')[1].split("</section>")[0]
        return {r.split("<th>")[1].split("</th>")[0]: r for r in section.split("<tr>")[2:]}

    live = rows()
    assert set(live) == {"rte", "stsb"}
    assert "<td>0.61</td><td>finetune</td><td>1</td><td>t1</td><td>1</td>" in live["rte"]  # the better trial
    assert "<td>0.74</td><td>joint</td><td>2</td><td>t2</td><td>2</td>" in live["stsb"]

    summary = summary_for(job_id)
    summary["tasks"] = {
        "rte": {"value": 0.61, "stage": "finetune", "epoch": 1, "trial_id": "t1", "run_id": "r1", "seed": 1,
                "registered_model": {"name": f"smartune-{job_id}-rte", "alias": "best", "version": "1",
                                     "uri": f"models:/smartune-{job_id}-rte@best"}},
        "stsb": {"value": 0.74, "stage": "joint", "epoch": 2, "trial_id": "t2", "run_id": "r2", "seed": 2,
                 "registered_model": {"name": f"smartune-{job_id}-stsb", "version": None, "error": "store /srv/x down"}},
    }  # fmt: skip
    fake_tracker.summaries[job_id] = summary
    fake_ray.set(f"{job_id}-a1", "SUCCEEDED")
    engine.tick()
    final = rows()
    assert f"<code>models:/smartune-{job_id}-rte@best</code>" in final["rte"]
    assert "store &lt;path&gt; down" in final["stsb"]  # the reason, without the server's path
    assert 'id="tasks"' not in client.get(f"/ui/jobs/{submit(client, team_key)['id']}").text  # one task: none
