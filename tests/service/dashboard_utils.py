"""Helpers of the dashboard tests: signing in through the login form, reading CSRF tokens, a sweep's
trials and per-epoch curves in the fake tracker, driven through the engine like the API tests do."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient

from service.engine.rounds import Engine
from tests.service.fakes import FakeRay, FakeTracker, summary_for
from tests.service.utils import spec, submit

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found, "no CSRF token on the page"
    return found.group(1)


def login(client: TestClient, key: str, **headers: str) -> Any:
    client.cookies.clear()  # a signed-in viewer is sent on from the login page: sign in afresh
    page = client.get("/ui/login")
    assert page.status_code == 200, page.text
    return client.post(
        "/ui/login",
        data={"csrf": csrf_of(page.text), "key": key, "next": "/ui/jobs"},
        headers=headers,
        follow_redirects=False,
    )


def logged_in(client: TestClient, key: str) -> TestClient:
    response = login(client, key)
    assert response.status_code == 303, response.text
    return client


GRID = {
    "learning_rate": {"type": "grid", "values": [1e-4, 5e-4]},
    "batch_size": {"type": "grid", "values": [8, 16]},
}


def sweep(
    client: TestClient,
    engine: Engine,
    fake_ray: FakeRay,
    tracker: FakeTracker,
    key: str,
    *,
    epochs: int = 3,
    seeds: tuple[int, ...] = (1, 2),
    finish: bool = True,
) -> str:
    """A 2 x 2 grid over `seeds`, dispatched and (with `finish`) succeeded, each trial with `epochs`
    epochs of score / train_loss / train_r_s in the fake tracker; returns the job id."""
    body = spec(
        search_space={"axes": GRID},
        seeds=list(seeds),
        training={"epochs": epochs},
        method="smart",
    )
    job_id = str(submit(client, key, body)["id"])
    engine.tick()
    fake_ray.set(f"{job_id}-a1", "RUNNING")
    n = 0
    for lr in GRID["learning_rate"]["values"]:
        for bs in GRID["batch_size"]["values"]:
            for seed in seeds:
                n += 1
                trial = f"t{n:03d}"
                scores = [
                    0.5 + 0.01 * e + (0.05 if lr == 1e-4 else 0.0) + 0.001 * seed
                    for e in range(1, epochs + 1)
                ]
                for e, s in enumerate(scores, start=1):
                    tracker.log_epoch(job_id, trial, e, score=s, train_loss=1.0 / e, train_r_s=0.1 / e)
                tracker.log_trial(
                    job_id,
                    trial,
                    "TERMINATED" if finish else "RUNNING",
                    max(scores),
                    epoch=epochs,
                    params={"learning_rate": lr, "batch_size": bs, "seed": seed},
                    metrics={"score": scores[-1], "train_loss": 1.0 / epochs, "train_r_s": 0.1 / epochs},
                )
    engine.tick()
    if finish:
        tracker.summaries[job_id] = summary_for(job_id, value=0.582)
        fake_ray.set(f"{job_id}-a1", "SUCCEEDED")
        engine.tick()
    return job_id
