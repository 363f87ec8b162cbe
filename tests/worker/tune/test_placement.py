"""Best-fit placement of GPU trials (worker.tune.placement): the choice of node, the hints a burst of trials
gets, the request's identity for Tune's actor reuse, the setting; then a real multi-node Ray cluster
(bench.placement, in its own process) where the hints pack a sweep's fractions onto one node and leave the
other whole, against Ray's own rule, which spreads them."""

from __future__ import annotations

import pickle

import pytest

from bench.placement import run
from worker.tune.placement import BestFit, HintedPlacement, bundle_of, choose_node, trial_resources
from worker.tune.settings import Settings

A, B, C = "a" * 56, "b" * 56, "c" * 56  # node ids (hex, as Ray's)


def test_the_fullest_node_that_fits_is_chosen() -> None:
    room = {A: {"CPU": 8, "GPU": 2.0}, B: {"CPU": 8, "GPU": 0.5}, C: {"CPU": 8, "GPU": 1.0}}
    assert choose_node({"CPU": 1, "GPU": 0.5}, room) == B  # left with 0 GPUs
    assert choose_node({"CPU": 1, "GPU": 1.0}, room) == C
    assert choose_node({"CPU": 1, "GPU": 2.0}, room) == A
    assert choose_node({"CPU": 1, "GPU": 3.0}, room) is None  # nowhere now: Ray queues it
    assert choose_node({"CPU": 9, "GPU": 0.5}, room) is None  # every resource must fit, not only GPUs
    assert choose_node({"GPU": 0.5, "gpu_memory_mb": 100}, room) is None  # a custom resource no node has


def test_ties_go_to_the_node_left_with_less_of_the_rest_then_the_lowest_id() -> None:
    room = {B: {"CPU": 8, "GPU": 1.0}, A: {"CPU": 8, "GPU": 1.0}, C: {"CPU": 2, "GPU": 1.0}}
    assert choose_node({"CPU": 1, "GPU": 1.0}, room) == C  # 1/2 of its CPUs left against 7/8
    assert choose_node({"GPU": 1.0}, room) == A


def test_a_burst_of_trials_fills_one_node_before_the_next() -> None:
    room = {A: {"CPU": 16, "GPU": 2.0}, B: {"CPU": 16, "GPU": 2.0}}
    fit = BestFit({"cpu": 1, "gpu": 0.5}, room=lambda: room)
    hints = [fit({})._kwargs.get("_soft_target_node_id") for _ in range(6)]
    assert hints == [A, A, A, A, B, B]  # the view never changed: the claims did the counting
    fit.claim_ttl_s = 0.0  # the view has caught up with them: claims no longer count
    assert fit({})._kwargs["_soft_target_node_id"] == A


def test_without_a_view_of_the_nodes_ray_places_the_trial() -> None:
    def broken() -> dict[str, dict[str, float]]:
        raise ConnectionError("GCS unreachable")

    request = BestFit({"cpu": 1, "gpu": 0.5}, room=broken)({})
    assert "_soft_target_node_id" not in request._kwargs and request.bundles == [{"CPU": 1.0, "GPU": 0.5}]


def test_the_hint_is_not_part_of_the_request_so_tune_reuses_actors() -> None:
    hinted = HintedPlacement([{"CPU": 1, "GPU": 0.5}], strategy="STRICT_PACK", _soft_target_node_id=A)
    other = HintedPlacement([{"CPU": 1, "GPU": 0.5}], strategy="STRICT_PACK", _soft_target_node_id=B)
    bigger = HintedPlacement([{"CPU": 1, "GPU": 1.0}], strategy="STRICT_PACK", _soft_target_node_id=A)
    assert hinted == other and hash(hinted) == hash(other)
    assert hinted != bigger
    copy = pickle.loads(pickle.dumps(hinted))  # Tune stores trials' requests in its experiment state
    assert copy == hinted and copy._kwargs["_soft_target_node_id"] == A


def test_only_gpu_trials_under_best_fit_get_hints() -> None:
    assert isinstance(trial_resources({"cpu": 1, "gpu": 0.5}), BestFit)
    assert trial_resources({"cpu": 1, "gpu": 0.5}, "ray") == {"cpu": 1, "gpu": 0.5}
    assert trial_resources({"cpu": 2}) == {"cpu": 2}  # CPU trials keep Ray's spreading
    assert bundle_of({"cpu": 1, "gpu": 0.0, "gpu_memory_mb": 512}) == {"CPU": 1.0, "gpu_memory_mb": 512.0}


def test_the_placement_setting_is_read_and_checked(tmp_path: object) -> None:
    assert Settings.from_env({}).placement == "best-fit"
    assert Settings.from_env({"SMARTUNE_TRIAL_PLACEMENT": "ray"}).placement == "ray"
    with pytest.raises(ValueError, match="SMARTUNE_TRIAL_PLACEMENT='spread'"):
        Settings.from_env({"SMARTUNE_TRIAL_PLACEMENT": "spread"})


@pytest.mark.usefixtures("starts_processes")  # a multi-node Ray cluster, in its own process
def test_on_a_real_two_node_cluster_best_fit_keeps_a_node_whole() -> None:
    packed, spread = run("best-fit", 2, 2, 0.5), run("ray", 2, 2, 0.5)
    assert sorted(packed["trials_per_node"].values()) == [0, 4]
    assert packed["whole_node_free_while_running"] is True
    assert sorted(spread["trials_per_node"].values()) == [2, 2]  # Ray's rule: the emptiest node
    assert spread["whole_node_free_while_running"] is False
