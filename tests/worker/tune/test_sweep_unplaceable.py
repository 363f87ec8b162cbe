"""A real sweep on the session's real Ray cluster (2 CPUs) whose trial asks for more CPUs than any node has,
with `SMARTUNE_WAIT_FOR_RESOURCES=1` so that the start-up check lets it through: the state a sweep is in
once the node its trials need has died for good. Tune alone would wait forever; the unplaceable guard
(worker.tune.unplaceable_guard) ends the sweep after its limit with the reason on the parent run, and the
experiment stays restorable for a retry."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from ray import tune

from tests.worker.conftest import _runs_of
from worker.contract.spec import JobSpec
from worker.contract.tags import ERROR_MESSAGE
from worker.tune.settings import Settings
from worker.tune.sweep import run_sweep
from worker.tune.unplaceable_guard import UnplaceableTrials

pytestmark = pytest.mark.glue

LIMIT_S = 6.0


def test_a_sweep_no_node_can_hold_fails_after_the_limit_with_the_reason(
    ray_cluster: dict[str, float], tiny_spec: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SMARTUNE_WAIT_FOR_RESOURCES", "1")  # as with an autoscaler: past the start-up check
    settings = Settings.from_env(
        {"SMARTUNE_DATA_DIR": str(tmp_path / "data"), "SMARTUNE_UNPLACEABLE_TIMEOUT_S": f"{LIMIT_S:g}"}
    )
    settings.prepare()
    cpus = ray_cluster["CPU"] + 2  # more than the whole (one-node) cluster has
    spec = JobSpec.model_validate(tiny_spec(method="vanilla", method_params={}, resources={"cpus": cpus}))
    started = time.monotonic()
    with pytest.raises(UnplaceableTrials) as raised:
        run_sweep(spec, job_id="unplaceable-1", settings=settings)
    waited = time.monotonic() - started
    message = str(raised.value)
    assert f"1 pending trial(s) need {cpus:g} CPU on one node" in message
    assert f"at most {ray_cluster['CPU']:g} CPU on one of 1 live node(s)" in message
    assert LIMIT_S <= waited < LIMIT_S + 60, waited  # the limit, plus the sweep's start and one check
    parent, children = _runs_of(settings, "unplaceable-1")
    assert parent.info.status == "FAILED"
    assert parent.data.tags[ERROR_MESSAGE].startswith("UnplaceableTrials: 1 pending trial(s) need")
    assert children == []  # no trial ever started
    assert tune.Tuner.can_restore(settings.experiment_path("unplaceable-1"))  # a retry resumes it
