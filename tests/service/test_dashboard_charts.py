"""The JSON behind the dashboard's charts: shapes, the server-side downsampling, the heat map's mean /
std / n over seeds, parallel coordinates, the live status and list cells, the short curve cache, and
clear 4xx / 503 answers for bad input or an unreachable MLflow."""

from __future__ import annotations

import math

import pytest
from fastapi.testclient import TestClient

from service.dashboard.charts import CurveCache
from service.engine.rounds import Engine
from service.series import clean, downsample, mean_std
from tests.service.dashboard_utils import logged_in, sweep
from tests.service.fakes import FakeRay, FakeTracker


@pytest.fixture
def job_id(
    client: TestClient, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker, team_key: str
) -> str:
    job = sweep(client, engine, fake_ray, fake_tracker, team_key, epochs=4)
    logged_in(client, team_key)
    return job


def test_curves_give_every_trials_epochs(client: TestClient, job_id: str) -> None:
    body = client.get(f"/ui/data/jobs/{job_id}/curves?key=score&key=train_loss").json()
    assert body["keys"] == ["score", "train_loss"]
    assert len(body["trials"]) == 8 and body["points"] == 8 * 4 * 2
    first = body["trials"][0]
    assert set(first) == {"trial_id", "state", "curves"}
    assert [p[0] for p in first["curves"]["score"]] == [1, 2, 3, 4]
    assert first["curves"]["train_loss"][1] == [2, 0.5]


def test_curves_are_downsampled_on_the_server(
    client: TestClient, job_id: str, fake_tracker: FakeTracker
) -> None:
    long = [(e, math.sin(e / 7.0)) for e in range(1, 501)]
    fake_tracker.histories[job_id]["t001"]["score"] = long
    body = client.get(f"/ui/data/jobs/{job_id}/curves?key=score&max_points=50&trial=t001").json()
    (trial,) = body["trials"]
    points = trial["curves"]["score"]
    assert 2 < len(points) <= 50
    assert points[0] == [1, pytest.approx(long[0][1], rel=1e-5)] and points[-1][0] == 500
    assert max(p[1] for p in points) == pytest.approx(max(v for _, v in long), rel=1e-5)  # extremes survive


@pytest.mark.parametrize(
    "query",
    [
        "",  # no key
        "key=score;drop",
        "key=mlflow.secret",
        "key=score&max_points=1",
        "key=score&max_points=5000",
        "&".join(f"key=train_k{i}" for i in range(9)),
        "key=score&trial=" + "t" * 129,
    ],
)
def test_bad_curve_queries_are_422(client: TestClient, job_id: str, query: str) -> None:
    response = client.get(f"/ui/data/jobs/{job_id}/curves?{query}")
    assert response.status_code == 422, response.text
    assert response.json()["detail"]


def test_an_unreachable_mlflow_is_a_503(client: TestClient, job_id: str, fake_tracker: FakeTracker) -> None:
    fake_tracker.down = True
    response = client.get(f"/ui/data/jobs/{job_id}/curves?key=train_r_s")
    assert response.status_code == 503 and "MLflow" in response.json()["detail"]


def test_the_heatmap_pools_seeds_per_cell(client: TestClient, job_id: str) -> None:
    body = client.get(f"/ui/data/jobs/{job_id}/heatmap?x=learning_rate&y=batch_size").json()
    assert body["x_values"] == ["0.0001", "0.0005"] and body["y_values"] == ["8", "16"]
    assert body["n"] == [[2, 2], [2, 2]]
    # seeds 1 and 2 add 0.001 and 0.002 to the same curve: best scores differ by 0.001
    assert body["z"][0][0] == pytest.approx(0.5 + 0.04 + 0.05 + 0.0015)
    assert body["std"][0][0] == pytest.approx(0.001 / math.sqrt(2))
    assert body["z"][0][1] == pytest.approx(0.5 + 0.04 + 0.0015)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("x=learning_rate&y=learning_rate", "query.y"),
        ("x=seed&y=batch_size", "query.x"),
        ("x=nope&y=batch_size", "query.x"),
    ],
)
def test_bad_heatmap_axes_are_422(client: TestClient, job_id: str, query: str, field: str) -> None:
    response = client.get(f"/ui/data/jobs/{job_id}/heatmap?{query}")
    assert response.status_code == 422 and response.json()["field"] == field


def test_parallel_coordinates_have_every_hyperparameter_and_the_metric(
    client: TestClient, job_id: str
) -> None:
    body = client.get(f"/ui/data/jobs/{job_id}/parallel").json()
    labels = [d["label"] for d in body["dimensions"]]
    assert labels == ["batch_size", "learning_rate", "seed", "accuracy"]
    assert all(len(d["values"]) == 8 for d in body["dimensions"]) and len(body["trial_ids"]) == 8


def test_status_and_list_cells(client: TestClient, job_id: str) -> None:
    status = client.get(f"/ui/data/jobs/{job_id}/status").json()
    assert status["state"] == "SUCCEEDED" and status["final"] is True
    assert status["progress"]["trials_done"] == 8 and status["progress"]["epochs_done"] == 32
    assert status["progress"]["epochs_planned"] == 32
    rows = client.get("/ui/data/jobs").json()
    assert rows["count"] == 1 and rows["jobs"][0]["id"] == job_id
    assert set(rows["jobs"][0]) == {
        "id",
        "state",
        "best_value",
        "started_at",
        "finished_at",
        "wait_reason",
        "progress",
    }


def test_polling_tabs_share_one_mlflow_read(
    client: TestClient, job_id: str, fake_tracker: FakeTracker
) -> None:
    before = fake_tracker.curve_reads
    for _ in range(3):
        assert client.get(f"/ui/data/jobs/{job_id}/curves?key=score").status_code == 200
    assert fake_tracker.curve_reads == before + 1


def test_the_curve_cache_expires() -> None:
    tracker = FakeTracker()
    tracker.log_epoch("j", "t", 1, score=0.5)
    cache = CurveCache(ttl_s=0.0)
    cache.get(tracker, "j", ["score"], 10, None)
    tracker.log_epoch("j", "t", 2, score=0.6)
    assert cache.get(tracker, "j", ["score"], 10, None)["t"]["score"] == [(1, 0.5), (2, 0.6)]


def test_downsample_keeps_short_series_and_ends() -> None:
    series = [(i, float(i % 5)) for i in range(10)]
    assert downsample(series, 10) == series
    thin = downsample(series * 1, 4)
    assert thin[0] == series[0] and thin[-1] == series[-1] and len(thin) <= 4
    with pytest.raises(ValueError):
        downsample(series, 1)


def test_clean_keeps_the_last_logged_value_per_step_and_drops_nan() -> None:
    # a resumed trial logs epoch 2 again; a skipped step logs NaN
    raw = [(1, 0.5, 100), (2, 0.6, 200), (2, 0.61, 300), (3, float("nan"), 400)]
    assert clean(raw) == [(1, 0.5), (2, 0.61)]


def test_mean_std_uses_the_sample_deviation() -> None:
    assert mean_std([1.0]) == (1.0, 0.0)
    mean, std = mean_std([1.0, 3.0])
    assert mean == 2.0 and std == pytest.approx(math.sqrt(2))
