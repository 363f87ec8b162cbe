"""The SDK's HTTP layer on a mock transport: the key and URL it uses, retries of 429/503 after Retry-After,
errors from the API's body, timeouts of `wait`, and the trials table's columns."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

import smartune
from smartune import _http
from smartune.frames import TRIAL_COLUMNS, trial_rows, trials_frame

Handler = Callable[[httpx.Request], httpx.Response]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SMARTUNE_URL", "SMARTUNE_API_KEY", "SMARTUNE_API_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(_http.time, "sleep", slept.append)
    return slept


def mock(handler: Handler, **kw: Any) -> smartune.Client:
    return smartune.Client(
        url="http://smartune.test", key="smt_k", transport=httpx.MockTransport(handler), **kw
    )


def answers(*responses: httpx.Response) -> tuple[Handler, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return responses[min(len(seen), len(responses)) - 1]

    return handler, seen


def test_the_url_and_key_come_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(smartune.SmartuneError, match="no API key") as none:
        smartune.Client()
    assert none.value.status is None
    monkeypatch.setenv("SMARTUNE_URL", "http://env.test:9000/")
    key_file = tmp_path / "key"
    key_file.write_text("smt_from_file\n")
    key_file.chmod(0o600)
    monkeypatch.setenv("SMARTUNE_API_KEY_FILE", str(key_file))
    handler, seen = answers(httpx.Response(200, json={"key_id": "k", "team": "nlp", "is_admin": False}))
    with smartune.Client(transport=httpx.MockTransport(handler)) as client:
        assert client.url == "http://env.test:9000" and client.whoami()["team"] == "nlp"
    assert str(seen[0].url) == "http://env.test:9000/api/v1/keys/me"
    assert seen[0].headers["authorization"] == "Bearer smt_from_file"
    monkeypatch.setenv("SMARTUNE_API_KEY", "smt_from_env")  # the variable wins over the file
    with smartune.Client(url="http://arg.test", transport=httpx.MockTransport(handler)) as client:
        client.whoami()
    assert (
        str(seen[1].url).startswith("http://arg.test/")
        and seen[1].headers["authorization"] == "Bearer smt_from_env"
    )
    key_file.chmod(0o644)
    monkeypatch.delenv("SMARTUNE_API_KEY")
    with pytest.warns(UserWarning, match="readable by others"):
        smartune.Client(transport=httpx.MockTransport(handler)).close()


def test_429_and_503_are_tried_again_after_retry_after(sleeps: list[float]) -> None:
    busy = httpx.Response(429, json={"detail": "slow down", "field": None}, headers={"Retry-After": "2"})
    down = httpx.Response(503, json={"detail": "database unreachable"}, headers={"Retry-After": "120"})
    handler, seen = answers(busy, down, httpx.Response(201, json={"id": "job-1"}))
    assert mock(handler).submit({"task": "rte"}, idempotency_key="k1") == "job-1"
    assert len(seen) == 3 and sleeps == [2.0, 60.0]  # capped at 60 s
    assert all(r.headers["idempotency-key"] == "k1" and r.content == b'{"task":"rte"}' for r in seen)

    sleeps.clear()
    handler, seen = answers(busy)
    with pytest.raises(smartune.SmartuneError) as refused:
        mock(handler, retries=2).jobs()
    assert (refused.value.status, refused.value.detail) == (429, "slow down")
    assert len(seen) == 3 and sleeps == [2.0, 2.0]  # bounded: the first try and two more


def test_retry_after_forms() -> None:
    def wait(value: str | None, cap: float = 60.0) -> float:
        headers = {"Retry-After": value} if value is not None else {}
        return _http.retry_after(httpx.Response(503, headers=headers), cap)

    assert wait("3") == 3.0 and wait("0") == 0.0 and wait("-5") == 0.0 and wait("999") == 60.0
    assert wait(None) == _http.DEFAULT_RETRY_S and wait("soon") == _http.DEFAULT_RETRY_S
    in_ten = email.utils.formatdate(time.time() + 10, usegmt=True)
    assert 8 <= wait(in_ten) <= 10


def test_errors_carry_status_detail_and_field() -> None:
    body = {"detail": "task: unknown", "field": "task", "errors": [{"field": "task", "msg": "unknown"}]}
    handler, _ = answers(httpx.Response(422, json=body))
    with pytest.raises(smartune.SmartuneError) as invalid:
        mock(handler).submit({"task": "mars"})
    err = invalid.value
    assert (err.status, err.detail, err.field, err.errors) == (422, "task: unknown", "task", body["errors"])
    assert str(err) == "422: task: unknown" and "field='task'" in repr(err)
    handler, _ = answers(httpx.Response(502, text="Bad Gateway from the proxy"))
    with pytest.raises(smartune.SmartuneError, match="502: Bad Gateway from the proxy"):
        mock(handler).job("job-1")


def test_an_unreachable_server_is_one_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(
        smartune.SmartuneError, match="cannot reach the server at http://smartune.test"
    ) as err:
        mock(refuse).pool()
    assert err.value.status is None


def test_wait_polls_until_a_final_state_or_times_out(
    sleeps: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    states = iter(["QUEUED", "RUNNING", "SUCCEEDED"])

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"id": "job-1", "state": next(states)})

    monkeypatch.setattr("smartune.client.time.sleep", sleeps.append)
    seen: list[str] = []
    job = mock(handler).wait("job-1", poll_s=0.5, progress=lambda j: seen.append(j["state"]))
    assert job["state"] == "SUCCEEDED" and seen == ["QUEUED", "RUNNING", "SUCCEEDED"] and sleeps == [0.5, 0.5]

    running = mock(lambda _r: httpx.Response(200, json={"id": "job-1", "state": "RUNNING"}))
    with pytest.raises(TimeoutError, match="job-1 is still RUNNING after 0.05 s"):
        running.wait("job-1", timeout=0.05, poll_s=0.01)


def test_a_ready_http_client_is_used_and_left_open() -> None:
    handler, seen = answers(httpx.Response(200, json={"data": [], "count": 0}))
    http = httpx.Client(base_url="http://given.test", transport=httpx.MockTransport(handler))
    with smartune.Client(http=http) as client:  # no key needed: the client's own headers go as they are
        assert client.jobs() == [] and "authorization" not in seen[0].headers
    assert not http.is_closed
    owned = mock(handler)
    with owned:
        pass
    assert owned._http.client.is_closed


def test_trial_rows_flatten_params_and_collect_metrics() -> None:
    trials = [
        {"trial_id": "t1", "params": {"learning_rate": 1e-4, "method": {"name": "smart"}}, "state": "TERMINATED",
         "attempt": 1, "best_score": 0.7, "last_epoch": 2, "error_class": None, "mlflow_run_id": "r1",
         "metrics": {"score": 0.7, "loss": 0.3}},
        {"trial_id": "t2", "params": {"learning_rate": 5e-4, "epsilon": None}, "state": "ERROR", "attempt": 2,
         "best_score": None, "last_epoch": None, "error_class": "oom", "mlflow_run_id": "r2", "metrics": {}},
    ]  # fmt: skip
    columns, rows = trial_rows(trials)
    assert columns == [
        "learning_rate",
        "method.name",
        "epsilon",
        *TRIAL_COLUMNS,
        "metrics.loss",
        "metrics.score",
    ]
    assert rows[0]["method.name"] == "smart" and rows[1]["error_class"] == "oom"
    frame = trials_frame(trials)
    assert frame.shape == (2, len(columns)) and frame.loc["t2", "state"] == "ERROR"
    assert frame["learning_rate"].tolist() == [1e-4, 5e-4]
    empty = trials_frame([])
    assert empty.shape == (0, len(TRIAL_COLUMNS)) and list(empty.columns) == list(TRIAL_COLUMNS)
