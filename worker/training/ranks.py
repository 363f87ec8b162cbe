"""Data-parallel arithmetic: which rank a process is, its share of a batch, and the collectives of an update.

A trial with `workers: N` trains on N ranks, one process each (rank 0 is the trial's own process,
worker.training.parallel starts the others). Every rank holds the whole model, optimiser, scheduler and
SMART's momentum teacher; each runs the objective (perturbation, teacher forward, divergences) on its
share of each batch. After the backward passes the ranks sum their gradients, each already weighted by
its share of the *whole* batch, so every rank applies the update one worker would make with the whole
batch, and the weights, the optimiser state and the teacher's EMA stay identical across ranks.

Why an explicit all-reduce and not `DistributedDataParallel`'s hooks: one SMART update runs two to four
forwards (clean, ascent, perturbed, teacher) through an adapter that bypasses the module's `forward`, and
an ascent whose `autograd.grad` targets the perturbation, not the weights. DDP's reducer assumes one
forward through its own wrapper per backward. The sum below is DDP's arithmetic (one flat buffer, one
collective per update) without the overlap of communication and backward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor


@dataclass(frozen=True)
class Ranks:
    """This process's place in its trial: `rank` of `world` processes (1: no data parallelism)."""

    rank: int = 0
    world: int = 1

    @property
    def parallel(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that evaluates, reports and checkpoints."""
        return self.rank == 0


SINGLE = Ranks()


def shard(chunks: list[list[int]], ranks: Ranks) -> tuple[list[int], float]:
    """This rank's examples of a batch split in `ranks.world` chunks, and how much its loss counts (1, or 0
    for a rank left without examples by a batch smaller than the world: it runs the first example with
    weight 0, so every rank computes the same components and joins the same collectives)."""
    if ranks.rank < len(chunks):
        return chunks[ranks.rank], 1.0
    return chunks[0][:1], 0.0


def all_reduce_gradients(params: list[torch.nn.Parameter]) -> None:
    """Sums every gradient across ranks in place (one flat buffer, one collective); a parameter without a
    gradient on this rank contributes zeros, and every rank ends with a gradient for it."""
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for param in params:
        size = param.numel()
        param.grad = flat[offset : offset + size].view_as(param).clone()
        offset += size


def all_reduce_sum(values: dict[str, Tensor]) -> dict[str, Tensor]:
    """Per-key sums across ranks of scalar tensors (every rank holds the same keys)."""
    keys = sorted(values)
    stacked = torch.stack([values[k].detach().float().reshape(()) for k in keys])
    dist.all_reduce(stacked, op=dist.ReduceOp.SUM)
    return dict(zip(keys, stacked.unbind(), strict=True))


def broadcast_from_main(tensors: list[Tensor]) -> None:
    """Every rank's `tensors` (live module tensors, updated in place) set to rank 0's."""
    for tensor in tensors:
        dist.broadcast(tensor.data, src=0)


def rank_seed(seed: int, rank: int, epoch: int) -> int:
    """The RNG seed of a rank other than 0 at the start of `epoch` (dropout masks, SMART's noise): its own
    stream, so ranks do not repeat each other's draws, and a function of the epoch, so a trial resumed at
    an epoch boundary draws what the uninterrupted one drew without storing the other ranks' RNG."""
    return (seed * 1_000_003 + rank * 10_007 + epoch) % 2**63


class RanksDiverged(RuntimeError):
    """The ranks of a data-parallel trial no longer hold the same weights (a bug or a faulty device)."""


def check_in_step(tensors: list[Tensor], what: str) -> None:
    """Raises RanksDiverged on every rank unless all ranks hold the same `tensors`: per tensor, the float64
    sum and sum of squares, compared by an all-reduce of their maximum and of their minimum (bitwise-equal
    tensors give equal sums; one collective pair, a few numbers per tensor)."""
    stats = torch.stack(
        [torch.stack([t.detach().double().sum(), t.detach().double().square().sum()]) for t in tensors]
    ).reshape(-1)
    high, low = stats.clone(), stats.clone()
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    if not torch.equal(high, low):
        worst = int((high - low).abs().argmax()) // 2
        raise RanksDiverged(f"the ranks hold different {what} (tensor {worst} of {len(tensors)} differs)")
