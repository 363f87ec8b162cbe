"""The process a custom function runs in: `python -m worker.tune.function_child READ_FD WRITE_FD`.

Started by the trial's process (worker.tune.function_process) with an environment without the worker
node's secrets; it talks to no one but its parent, over the two pipes it is given (messages:
worker.tune.function_protocol). It reads the job, imports the function, seeds as a trial seeds, calls
`fn(config, reporter, data_roots)` with a reporter that forwards each epoch to the parent and waits for
its reply, and ends with `done` or the failure. Its stdout and stderr are the parent's to show (the
trial's output). Imports neither Ray nor MLflow: the parent alone speaks to Tune and the tracking store.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from worker.contract.errors import UserFunctionError, classify, diagnose
from worker.tune.function_protocol import (
    FunctionJob,
    decode,
    encode,
    failure_message,
    parse_reply,
    report_message,
)
from worker.tune.user_function import ReportRefused, call_function, load_function, metric_number, one_line

PR_SET_PDEATHSIG = 1  # prctl(2)


class Channel:
    """The child's ends of the two pipes: one message out, one in."""

    def __init__(self, incoming: BinaryIO, outgoing: BinaryIO) -> None:
        self.incoming, self.outgoing = incoming, outgoing

    def send(self, message: Mapping[str, object]) -> None:
        self.outgoing.write(encode(message))
        self.outgoing.flush()

    def receive(self) -> bytes:
        line = self.incoming.readline()
        if not line:
            raise EOFError("the trial's process closed the pipe")
        return line


class ChildReporter:
    """The function's `reporter`: each report goes to the trial's Reporter (which numbers the epoch, scores
    it, logs it and hands it to Tune) and returns once that is done, or raises its refusal."""

    def __init__(self, channel: Channel, checkpoint: Path | None) -> None:
        self._channel = channel
        self.checkpoint = checkpoint

    def report(self, metrics: Mapping[str, float], checkpoint_dir: str | Path | None = None) -> None:
        values = {str(k): metric_number(k, v) for k, v in metrics.items()}  # only numbers cross the pipe
        folder = os.path.abspath(checkpoint_dir) if checkpoint_dir is not None else None
        self._channel.send(report_message(values, folder))
        refused = parse_reply(self._channel.receive())
        if refused is not None:
            raise ReportRefused(refused)


def failure(err: BaseException) -> dict[str, object]:
    """What the parent is told of a failure: the UserFunctionError's message (as the trial's process used
    to raise it), and whether memory ran out (judged here, where it happened: the address space's limit)."""
    message = str(err) if isinstance(err, UserFunctionError) else one_line(err)
    cause = err.__cause__ if isinstance(err, UserFunctionError) and err.__cause__ is not None else err
    oom = classify(err) == "oom" or diagnose(cause)[0] == "oom"
    return failure_message(message, oom)


def run(channel: Channel) -> int:
    job = FunctionJob.from_message(decode(channel.receive()))
    # Where the trial's process could import the function from (a Ray runtime_env folder, say), after ours.
    sys.path += [entry for entry in job.path if entry not in sys.path]
    try:
        import torch

        from worker.training.seeding import seed_everything

        torch.set_num_threads(job.threads)
        fn = load_function(job.entrypoint)  # before seeding: what its import draws does not shift the seed
        seed_everything(job.seed, job.deterministic)
        checkpoint = Path(job.checkpoint) if job.checkpoint is not None else None
        call_function(fn, job.config, ChildReporter(channel, checkpoint), [Path(r) for r in job.roots])
    except BaseException as err:  # sys.exit in the function too: it ended the call without returning
        sys.stdout.flush()
        traceback.print_exception(err)  # the user's frames: into the trial's log (only the line crosses)
        sys.stderr.flush()
        channel.send(failure(err))
        return 1
    sys.stdout.flush()
    channel.send({"done": True})
    return 0


def die_with_parent() -> None:
    """Linux: the kernel kills this process when the trial's process dies (a Ray worker is SIGKILLed when
    its actor is killed, and its `finally` never runs). Elsewhere nothing: the closed pipe ends it at
    its next report."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def main(argv: list[str]) -> int:
    read_fd, write_fd = int(argv[0]), int(argv[1])
    die_with_parent()
    for fd in (read_fd, write_fd):  # the function's own subprocesses do not hold the pipes open
        os.set_inheritable(fd, False)
    with os.fdopen(read_fd, "rb") as incoming, os.fdopen(write_fd, "wb") as outgoing:
        return run(Channel(incoming, outgoing))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
