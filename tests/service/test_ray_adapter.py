"""How the control plane reads Ray's answers: by status code, with a timeout on every call.

The dashboard is replaced by httpx's MockTransport here (its real behaviour is exercised by the integration
tests on a real Ray head); what is checked is the mapping the engine relies on.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from service.engine.ray_jobs import JobSubmissionAdapter, RayJobError, RayJobExists, RayUnavailable

Handler = Callable[[httpx.Request], httpx.Response]


def adapter(handler: Handler) -> JobSubmissionAdapter:
    return JobSubmissionAdapter("127.0.0.1:8265", token="t", transport=httpx.MockTransport(handler))


def test_unknown_comes_from_a_real_404_only() -> None:
    assert adapter(lambda r: httpx.Response(404, text="Job x does not exist")).info("x") is None
    with pytest.raises(RayUnavailable):  # a 5xx that happens to say "does not exist" is not "unknown"
        adapter(lambda r: httpx.Response(500, text="agent: job does not exist yet")).info("x")
    running = adapter(lambda r: httpx.Response(200, json={"status": "RUNNING", "message": "ok"}))
    assert running.info("x").status == "RUNNING"  # type: ignore[union-attr]


def test_transient_answers_are_retried_later_and_permanent_ones_are_not() -> None:
    for code in (500, 502, 503, 401, 403):
        with pytest.raises(RayUnavailable):
            adapter(lambda r, c=code: httpx.Response(c, text="busy")).submit(
                submission_id="j-a1", entrypoint="true", env_vars={}, metadata={}
            )
    with pytest.raises(RayJobExists):
        adapter(lambda r: httpx.Response(400, text="Job with submission_id j-a1 already exists.")).submit(
            submission_id="j-a1", entrypoint="true", env_vars={}, metadata={}
        )
    with pytest.raises(RayJobError, match="400"):
        adapter(lambda r: httpx.Response(400, text="invalid runtime_env")).submit(
            submission_id="j-a1", entrypoint="true", env_vars={}, metadata={}
        )


def test_a_hung_dashboard_times_out() -> None:
    def hang(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with pytest.raises(RayUnavailable, match="ReadTimeout"):
        adapter(hang).info("x")
    assert JobSubmissionAdapter("http://127.0.0.1:1", timeout_s=0.5)._http.timeout.read == 0.5


def test_submission_carries_the_attempt_and_its_environment() -> None:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"job_id": "raysubmit", "submission_id": "j-a1"})

    adapter(record).submit(
        submission_id="j-a1", entrypoint="python -m x", env_vars={"A": "1"}, metadata={"m": "v"}
    )
    body = seen[0].read().decode()
    assert seen[0].url.path == "/api/jobs/" and '"submission_id":"j-a1"' in body.replace(" ", "")
    assert seen[0].headers["authorization"] == "Bearer t"
    assert "entrypoint_num" not in body  # a sweep's driver reserves nothing
    adapter(record).submit(
        submission_id="a-a1",
        entrypoint="python -m y",
        env_vars={},
        metadata={},
        entrypoint_cpus=2,
        entrypoint_gpus=1,
    )
    audit = json.loads(seen[1].read())
    assert (audit["entrypoint_num_cpus"], audit["entrypoint_num_gpus"]) == (2, 1)


@pytest.mark.parametrize("nodes", [[], [type("Node", (), {"resources_total": None})()]])
def test_a_pool_listed_without_cpus_is_unknown_not_zero(
    nodes: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh head lists its node late, and a busy dashboard can answer without one: reading that as a
    pool of zero would refuse every submission as unfittable until the next read."""
    from ray.util.state.api import StateApiClient

    monkeypatch.setattr(StateApiClient, "list", lambda *_a, **_kw: nodes)
    with pytest.raises(RayUnavailable, match="no live node"):
        adapter(lambda r: httpx.Response(200)).capacity()


def test_dead_nodes_are_dropped_here_and_an_autoscaled_pool_may_read_zero(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ray 2.60's own `state=ALIVE` filter made every read raise once a node had died (an autoscaler removing
    an idle node: tests/integration/test_autoscaling_server.py), so every node is listed, as many as the
    dashboard gives, and the dead ones dropped here. A head that offers no CPUs, its workers scaled to zero,
    is a pool of zero only where an autoscaler will add the rest (`empty_ok`)."""
    from ray.util.state.api import StateApiClient
    from ray.util.state.common import RAY_MAX_LIMIT_FROM_API_SERVER, ListApiOptions

    from service.engine.scheduler import Resources

    asked: list[ListApiOptions] = []

    def listing(_client: object, _resource: object, options: ListApiOptions, **_kw: object) -> list[object]:
        asked.append(options)
        node = type("Node", (), {})
        dead, head = node(), node()
        dead.state, dead.resources_total = "DEAD", {"CPU": 8.0, "GPU": 1.0}  # type: ignore[attr-defined]
        head.state, head.resources_total = "ALIVE", {"memory": 1e9}  # type: ignore[attr-defined]
        return [dead, head]

    monkeypatch.setattr(StateApiClient, "list", listing)
    with pytest.raises(RayUnavailable, match="no live node with CPUs"):
        adapter(lambda r: httpx.Response(200)).capacity()  # without an autoscaler: not read yet
    scaled = JobSubmissionAdapter("127.0.0.1:8265", token="t", empty_ok=True)
    assert scaled.capacity() == Resources(0.0, 0.0)  # the dead node's GPU is not counted
    assert asked[0].filters == [] and asked[0].limit == RAY_MAX_LIMIT_FROM_API_SERVER
