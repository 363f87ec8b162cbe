"""The order of task batches in one joint (multitask) epoch: every batch comes from one task (MT-DNN).

`task_batch_order(batches, sampling, seed, epoch)` takes how many batches each task has this epoch and
returns (task, batch index) pairs, each pair exactly once:
- round-robin: one batch of each task in turn, in the given task order; a task whose batches are used up
  drops out, so the smaller tasks finish early and the largest fills the end of the epoch;
- proportional: a seeded shuffle of all the pairs (MT-DNN's sampler). Each task's expected share of any
  stretch of the epoch is its share of the batches: proportional to its size by construction.
Both are a pure function of (batches, sampling, seed, epoch): a resumed epoch replays the same order.
Pure Python: its own `random.Random`, the global random streams are untouched.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

TaskBatch = tuple[str, int]  # (task name, index into that task's batches of the epoch)


def round_robin(batches: Mapping[str, int]) -> list[TaskBatch]:
    order: list[TaskBatch] = []
    for k in range(max(batches.values(), default=0)):
        order += [(task, k) for task, count in batches.items() if k < count]
    return order


def proportional(batches: Mapping[str, int], seed: int, epoch: int) -> list[TaskBatch]:
    order = [(task, k) for task, count in batches.items() for k in range(count)]
    # A string seed hashes stably (SHA-512 inside Random.seed), unlike hash() of a tuple across processes.
    random.Random(f"task-order:{seed}:{epoch}").shuffle(order)
    return order


def task_batch_order(batches: Mapping[str, int], sampling: str, seed: int, epoch: int) -> list[TaskBatch]:
    """The epoch's (task, batch index) pairs in training order; `epoch` is 0-based."""
    if any(count < 0 for count in batches.values()):
        raise ValueError(f"batch counts must be >= 0, got {dict(batches)}")
    if sampling == "round-robin":
        return round_robin(batches)
    if sampling == "proportional":
        return proportional(batches, seed, epoch)
    raise ValueError(f"multitask.sampling: unknown sampling {sampling!r} (round-robin or proportional)")
