"""One method parameter followed from the REST body to smart_core (docs/architecture.md §2, "One trial
field, followed"): `lambda_s` keeps its name and its place in every room, and the driver runs the plan the
control plane priced."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from service.engine.rounds import Engine
from tests.service.fakes import FakeRay
from tests.service.utils import auth, spec, submit
from worker.contract.grid import flat_config, resolve
from worker.contract.spec import PLAN_DIGEST_ENV, JobSpec
from worker.contract.specfile import spec_from_text


def _at_the_driver(
    client: TestClient, key: str, engine: Engine, fake_ray: FakeRay, body: dict[str, Any]
) -> tuple[dict[str, Any], JobSpec]:
    """POST the body, dispatch it; the stored spec and the spec the sweep driver reads from its
    environment (as worker.tune.sweep.load_spec and check_plan do)."""
    job_id = submit(client, key, body)["id"]
    stored = client.get(f"/api/v1/jobs/{job_id}", headers=auth(key)).json()["spec"]
    engine.tick()
    env = fake_ray.jobs[f"{job_id}-a1"].env_vars
    at_driver = spec_from_text(env["SMARTUNE_JOB_SPEC"], "SMARTUNE_JOB_SPEC")
    assert at_driver.plan_digest() == env[PLAN_DIGEST_ENV]  # the plan the service priced, expanded again
    return stored, at_driver


def test_lambda_s_from_the_body_to_the_method_config(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay
) -> None:
    body = spec(method="smart", method_params={"lambda_s": 3.0, "epsilon": 1e-4})
    stored, at_driver = _at_the_driver(client, team_key, engine, fake_ray, body)
    assert stored["method_params"] == {"lambda_s": 3.0, "epsilon": 1e-4}  # the spec as stored, as sent
    trials = at_driver.trials()  # Tune's grid: {"train": trial} each (worker.tune.tuning.param_space)
    assert [t["method_params"] for t in trials] == [{"epsilon": 1e-4, "lambda_s": 3.0}] * 2
    for trial in trials:
        resolved = resolve(trial, None, ("learning_rate",))  # worker.tune.tuning.resolve_trial's
        assert resolved.config.method_params == {"epsilon": 1e-4, "lambda_s": 3.0}
        assert resolved.config.method_config().lambda_s == 3.0  # smart_core's MethodConfig
        assert flat_config(resolved.config)["lambda_s"] == 3.0  # the run's MLflow param `lambda_s`


def test_lambda_s_as_a_grid_axis(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay
) -> None:
    body = spec(method="smart", method_params={"lambda_s": 3.0},
                search_space={"axes": {"lambda_s": {"type": "grid", "values": [1.0, 5.0]}}})  # fmt: skip
    stored, at_driver = _at_the_driver(client, team_key, engine, fake_ray, body)
    assert stored["search_space"]["axes"]["lambda_s"]["values"] == [1.0, 5.0]
    resolved = [resolve(t, None, ("lambda_s",)) for t in at_driver.trials()]
    assert [r.config.method_params for r in resolved] == [{"lambda_s": 1.0}, {"lambda_s": 5.0}]
    assert [r.config.method_config().lambda_s for r in resolved] == [1.0, 5.0]
    assert [r.cell for r in resolved] == [{"lambda_s": 1.0}, {"lambda_s": 5.0}]  # the run's `smartune.cell`


def test_two_axes_in_the_body_order_plan_as_the_stored_json_does(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay
) -> None:
    """The body lists `learning_rate` before `lambda_s`; the stored spec's JSON sorts its keys, so the driver
    expands the axes in the other order: the same trials, and the digest the service priced still matches."""
    axes = {"learning_rate": {"type": "grid", "values": [1e-4, 5e-4]},
            "lambda_s": {"type": "grid", "values": [1.0, 3.0]}}  # fmt: skip
    body = spec(method="smart", search_space={"axes": axes})
    _, at_driver = _at_the_driver(client, team_key, engine, fake_ray, body)
    cells = {(t["learning_rate"], t["method_params"]["lambda_s"]) for t in at_driver.trials()}
    assert cells == {(lr, ls) for lr in (1e-4, 5e-4) for ls in (1.0, 3.0)}
