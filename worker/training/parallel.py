"""Starting and ending a data-parallel trial: rank 0 is the calling process, ranks 1..N-1 are children.

`data_parallel(config, state)` is a context manager around one run. With `config.workers == 1` it yields
`SINGLE` and does nothing else. With N > 1 it spawns N-1 follower processes on this node (a trial's GPUs
come as one Ray bundle, so they share a node), joins them in a process group (NCCL on GPUs, gloo on CPU)
and yields rank 0's `Ranks`. Each follower builds the same session, loads the same restored `state` (the
session part of a trial checkpoint), and trains the same epochs in step with rank 0, which alone
evaluates, reports and checkpoints (the state is rank-independent: weights, optimiser and teacher are
identical on every rank, and the other ranks' RNG streams are re-derived at each epoch). On exit, whether
the run ended, failed or was stopped by the scheduler, the followers are ended and the group destroyed; a
follower's failure is raised in rank 0 as `RankFailed` with the follower's traceback.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import pickle
import queue
import signal
import socket
import sys
import tempfile
import traceback
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from worker.contract.trial import TrainConfig
from worker.training.loop import train_epoch
from worker.training.prepared import PreparedData
from worker.training.ranks import SINGLE, Ranks
from worker.training.session import TrainingSession

# How long a rank waits in a collective for the others: rank 0 evaluates, logs the best model and reports
# a checkpoint between epochs while the followers wait at their next step.
COLLECTIVE_TIMEOUT = timedelta(minutes=float(os.environ.get("SMARTUNE_COLLECTIVE_TIMEOUT_MIN", "60")))
PR_SET_PDEATHSIG = 1  # prctl(2) option: the signal a process gets when its parent dies
JOIN_SECONDS = 10.0  # a follower's grace to exit on its own once rank 0 is done, before it is killed


class RankFailed(RuntimeError):
    """A follower rank of a data-parallel trial failed; the message carries its traceback."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _backend(config: TrainConfig) -> str:
    uses_cuda = config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available())
    return "nccl" if uses_cuda else "gloo"


def _join_group(config: TrainConfig, ranks: Ranks, address: str) -> None:
    if _backend(config) == "nccl":
        torch.cuda.set_device(ranks.rank)  # NCCL's collectives run on the rank's own GPU
    dist.init_process_group(
        _backend(config),
        init_method=address,
        rank=ranks.rank,
        world_size=ranks.world,
        timeout=COLLECTIVE_TIMEOUT,
    )


def follow(
    rank: int,
    world: int,
    address: str,
    config_values: dict[str, Any],
    state_path: str | None,
    data_path: str | None,
    errors: Any,  # multiprocessing.Queue of (rank, traceback text)
) -> None:
    """A follower rank's whole life: join, build, restore, train every remaining epoch in step with rank 0."""
    ranks = Ranks(rank, world)
    _die_with_parent()
    try:
        config = TrainConfig.from_dict(config_values)
        _join_group(config, ranks, address)
        data = pickle.loads(Path(data_path).read_bytes()) if data_path is not None else None
        session = TrainingSession.build(config, ranks, data)
        if state_path is not None:
            session.load_state_dict(torch.load(state_path, weights_only=True))
        while session.position.epoch < config.epochs:
            train_epoch(session)
    except BaseException:
        errors.put((rank, traceback.format_exc()))
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _die_with_parent() -> None:
    """On Linux, the kernel ends this follower when rank 0's process dies (a SIGKILLed trial leaves no rank
    behind holding its GPU); elsewhere the follower ends at its next collective, when the peer is gone."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _failures(errors: Any) -> str:
    found = []
    with contextlib.suppress(queue.Empty):
        while True:
            rank, text = errors.get(timeout=0.5)
            found.append(f"rank {rank}:\n{text}")
    return "\n".join(found)


@contextlib.contextmanager
def data_parallel(
    config: TrainConfig, state: dict[str, Any] | None = None, data: PreparedData | None = None
) -> Iterator[Ranks]:
    """The ranks of one run (see the module's docstring); `state` is what rank 0 restores, if anything;
    `data` the prepared data rank 0 builds its session with (the followers get it too)."""
    if config.workers == 1:
        yield SINGLE
        return
    world = config.workers
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked CUDA or thread state
    errors = context.Queue()
    address = f"tcp://127.0.0.1:{_free_port()}"
    with tempfile.TemporaryDirectory(prefix="smartune-ranks-") as tmp:
        state_path = data_path = None
        if state is not None:
            state_path = str(Path(tmp) / "state.pt")
            torch.save(state, state_path)
        if data is not None:  # our own plain data, in our own private folder: pickle is safe here
            data_path = str(Path(tmp) / "data.pickle")
            Path(data_path).write_bytes(pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL))
        followers = [
            context.Process(
                target=follow,
                args=(rank, world, address, config.to_dict(), state_path, data_path, errors),
                name=f"smartune-rank-{rank}",
                daemon=True,
            )
            for rank in range(1, world)
        ]
        for process in followers:
            process.start()
        try:
            _join_group(config, Ranks(0, world), address)
            yield Ranks(0, world)
        except Exception as err:
            failed = _failures(errors)
            if failed:
                raise RankFailed(f"a data-parallel rank failed:\n{failed}") from err
            raise
        finally:
            _end(followers)


def _end(followers: list[Any]) -> None:
    """Destroys rank 0's group, then lets each follower finish (it is done once rank 0 is) or ends it."""
    if dist.is_initialized():
        dist.destroy_process_group()
    for process in followers:
        process.join(timeout=JOIN_SECONDS)
        if process.is_alive():
            process.terminate()
            process.join(timeout=JOIN_SECONDS)
        if process.is_alive():
            process.kill()
            process.join()
