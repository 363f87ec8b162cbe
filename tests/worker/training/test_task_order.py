"""The batch order of a joint (multitask) epoch: each task batch once, deterministic per seed and epoch."""

from __future__ import annotations

from collections import Counter

import pytest

from worker.training.task_order import task_batch_order

COUNTS = {"rte": 3, "stsb": 5, "mrpc": 1}


@pytest.mark.parametrize("sampling", ["round-robin", "proportional"])
def test_every_task_batch_appears_once_per_epoch(sampling: str) -> None:
    order = task_batch_order(COUNTS, sampling, seed=1, epoch=0)
    assert Counter(order) == Counter((t, k) for t, n in COUNTS.items() for k in range(n))
    if sampling == "round-robin":  # within a task its batches keep their epoch order
        assert all([k for t, k in order if t == task] == list(range(n)) for task, n in COUNTS.items())


def test_round_robin_interleaves_until_each_task_is_used_up() -> None:
    assert task_batch_order(COUNTS, "round-robin", seed=1, epoch=0) == [
        ("rte", 0), ("stsb", 0), ("mrpc", 0),
        ("rte", 1), ("stsb", 1),
        ("rte", 2), ("stsb", 2),
        ("stsb", 3),
        ("stsb", 4),
    ]  # fmt: skip


@pytest.mark.parametrize("sampling", ["round-robin", "proportional"])
def test_order_is_a_function_of_seed_and_epoch(sampling: str) -> None:
    assert task_batch_order(COUNTS, sampling, 7, 2) == task_batch_order(dict(COUNTS), sampling, 7, 2)


def test_proportional_order_differs_across_epochs_and_seeds() -> None:
    big = {"a": 20, "b": 10}
    epochs = [task_batch_order(big, "proportional", seed=1, epoch=e) for e in range(3)]
    assert epochs[0] != epochs[1] != epochs[2]
    assert task_batch_order(big, "proportional", seed=2, epoch=0) != epochs[0]
    # proportional by construction: the first half of the epoch holds about 2/3 batches of `a`
    first_half = Counter(t for t, _ in epochs[0][:15])
    assert 6 <= first_half["a"] <= 14


def test_unknown_sampling_is_refused() -> None:
    with pytest.raises(ValueError, match="multitask.sampling"):
        task_batch_order(COUNTS, "temperature", seed=1, epoch=0)
