"""The JSON behind the dashboard's charts: shapes, the server-side downsampling, the heat map's mean /
std / n over seeds, parallel coordinates, the live status and list cells, the short curve cache, and
clear 4xx / 503 answers for bad input or an unreachable MLflow."""

from __future__ import annotations

import math

import pytest
from fastapi.testclient import TestClient

from service.dashboard.bands import bands, labels, log_scale, short
from service.dashboard.charts import CurveCache, parallel
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
    assert set(first) == {"trial_id", "state", "label", "cell", "curves"}
    assert [p[0] for p in first["curves"]["score"]] == [1, 2, 3, 4]
    assert first["curves"]["train_loss"][1] == [2, 0.5]


def test_each_trial_is_labelled_by_its_cell_and_seed(client: TestClient, job_id: str) -> None:
    body = client.get(f"/ui/data/jobs/{job_id}/curves?key=score").json()
    labels = {t["trial_id"]: (t["cell"], t["label"]) for t in body["trials"]}
    # the sweep's first trials: lr 1e-4, batch 8, seeds 1 and 2 (batch_size and learning_rate both vary)
    assert labels["t001"] == ("batch_size=8 learning_rate=1e-4", "batch_size=8 learning_rate=1e-4 seed=1")
    assert labels["t002"] == ("batch_size=8 learning_rate=1e-4", "batch_size=8 learning_rate=1e-4 seed=2")
    assert len({label for _cell, label in labels.values()}) == 8  # no two trials read alike


def test_each_cell_has_a_mean_and_std_band_over_its_seeds(client: TestClient, job_id: str) -> None:
    body = client.get(f"/ui/data/jobs/{job_id}/curves?key=score&key=train_loss").json()
    cells = {c["label"]: c for c in body["cells"]}
    assert len(cells) == 4
    cell = cells["batch_size=8 learning_rate=1e-4"]
    assert cell["trial_ids"] == ["t001", "t002"]
    epoch, mean, std, n = cell["bands"]["score"][0]
    # epoch 1 of seeds 1 and 2: 0.5 + 0.01 + 0.05 + 0.001 * seed
    assert (epoch, n) == (1, 2)
    assert mean == pytest.approx(0.5615) and std == pytest.approx(0.001 / math.sqrt(2), rel=1e-4)
    assert [row[0] for row in cell["bands"]["train_loss"]] == [1, 2, 3, 4]


def test_a_cell_of_one_seed_has_no_std(client: TestClient, job_id: str) -> None:
    body = client.get(f"/ui/data/jobs/{job_id}/curves?key=score&trial=t001&trial=t003").json()
    for cell in body["cells"]:
        assert [row[3] for row in cell["bands"]["score"]] == [1, 1, 1, 1]
        assert all(row[2] is None for row in cell["bands"]["score"])  # undefined, not 0


def test_the_curves_say_which_keys_start_on_a_log_axis(client: TestClient, job_id: str) -> None:
    body = client.get(f"/ui/data/jobs/{job_id}/curves?key=score&key=train_loss&key=train_r_s").json()
    # score 0.51..0.59: linear; train_loss 1..1/4 and train_r_s 0.1..0.025 span less than a decade
    assert body["log"] == {"score": False, "train_loss": False, "train_r_s": False}


def test_the_log_axis_decision() -> None:
    assert log_scale([1e-5, 3e-5, 1e-4]) is True  # a decade
    assert log_scale([2e-5, 5e-5]) is False  # not a decade apart
    assert log_scale([1e-5, 0.5]) is True
    assert log_scale([0.0, 1e-5, 1.0]) is False  # zero has no place on a log axis
    assert log_scale([-1.0, 10.0]) is False
    assert log_scale(["a", 1.0]) is False and log_scale([True, 100]) is False
    assert log_scale([]) is False and log_scale([float("nan"), 1.0]) is False


def test_labels_name_what_differs_and_values_read_short() -> None:
    trials = [
        {"trial_id": "a", "params": {"method": "smart", "learning_rate": 2e-5, "seed": 1}},
        {"trial_id": "b", "params": {"method": "smart", "learning_rate": 1e-4, "seed": 2}},
        {"trial_id": "c", "params": {"method": "pgd", "learning_rate": 2e-5, "seed": 1}},
    ]
    assert labels(trials)["a"] == (
        "learning_rate=2e-5 method=smart",
        "learning_rate=2e-5 method=smart seed=1",
    )
    assert labels(trials)["b"][1] == "learning_rate=1e-4 method=smart seed=2"
    same = [{"trial_id": "x", "params": {"lambda_s": 3.0}}, {"trial_id": "y", "params": {"lambda_s": 3.0}}]
    assert labels(same) == {"x": ("lambda_s=3", "lambda_s=3 x"), "y": ("lambda_s=3", "lambda_s=3 y")}
    assert [short(v) for v in (0.3, 10, 1.5e-7, "mean", [1, 2])] == ["0.3", "10", "1.5e-7", "mean", "[1, 2]"]


def test_bands_over_uneven_seeds() -> None:
    curves = {"a": {"k": [[1, 1.0], [2, 2.0]]}, "b": {"k": [[1, 3.0]]}, "c": {}}
    out = bands({"cell": ["a", "b"], "none": ["c"]}, curves, "k")
    assert set(out) == {"cell"}  # a cell without points has no band
    (first, second) = out["cell"]
    assert first[:2] == [1, 2.0] and first[2] == pytest.approx(math.sqrt(2), rel=1e-5) and first[3] == 2
    assert second == [2, 2.0, None, 1]  # one seed logged epoch 2: no std


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
    names = [d["label"] for d in body["dimensions"]]
    assert names == ["batch_size", "learning_rate", "seed", "accuracy"]
    assert all(len(d["values"]) == 8 for d in body["dimensions"]) and len(body["trial_ids"]) == 8
    assert sorted(body["dimensions"][2]["values"]) == [1, 1, 1, 1, 2, 2, 2, 2]  # the seed, per trial
    metric = body["dimensions"][-1]
    assert metric["range"] == [min(metric["values"]), max(metric["values"])]  # the colour bar's span
    assert [d["log"] for d in body["dimensions"]] == [False, False, False, False]  # 1e-4..5e-4: not a decade


def test_parallel_marks_a_parameter_spanning_decades_for_a_log_axis() -> None:
    trials = [
        {
            "trial_id": f"t{i}",
            "params": {"learning_rate": lr, "lambda_s": lam, "seed": 1},
            "best_score": 0.5 + i / 10,
        }
        for i, (lr, lam) in enumerate([(1e-5, 0.0), (1e-4, 1.0), (1e-3, 3.0)])
    ]
    body = parallel(trials, ["lambda_s", "learning_rate", "seed"], "accuracy")
    log = {d["label"]: d["log"] for d in body["dimensions"]}
    assert log == {"lambda_s": False, "learning_rate": True, "seed": False, "accuracy": False}
    assert body["dimensions"][-1]["range"] == [0.5, pytest.approx(0.7)]
    assert parallel([], ["seed"], "accuracy")["dimensions"][-1]["range"] is None


def test_status_and_list_cells(client: TestClient, job_id: str) -> None:
    status = client.get(f"/ui/data/jobs/{job_id}/status").json()
    assert status["state"] == "SUCCEEDED" and status["final"] is True
    assert status["progress"]["trials_done"] == 8 and status["progress"]["epochs_done"] == 32
    assert status["progress"]["epochs_planned"] == 32
    rows = client.get("/ui/data/jobs").json()
    assert rows["count"] == 1 and rows["jobs"][0]["id"] == job_id
    assert set(rows["jobs"][0]) == {
        "id",
        "kind",
        "state",
        "best_value",
        "verdict",
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
    assert mean_std([1.0]) == (1.0, None)  # undefined, not 0
    mean, std = mean_std([1.0, 3.0])
    assert mean == 2.0 and std == pytest.approx(math.sqrt(2))
