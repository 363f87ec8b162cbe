"""Running a custom function in a child process of the trial's, without the worker node's secrets.

A Ray worker process inherits its node's environment: on a team stack the object store's root credentials
(`AWS_*`), the cluster's `RAY_AUTH_TOKEN` and the team's MLflow login. The trial's process keeps them (it
writes checkpoints and logs metrics); the user's function runs in `python -m worker.tune.function_child`,
started with `function_environment(os.environ)`, the same working directory and the same session (so a
kill of the trial's process group reaches it). The trial's process stays the only one that speaks to Tune
and MLflow: the child sends each report over a pipe (worker.tune.function_protocol) and waits while the
trial's `Reporter` handles it. The child's stdout and stderr are copied into this process's `sys.stdout` and
`sys.stderr` as they come, so the trial's kept output (worker.tune.trial_output) shows the function's prints.
"""

from __future__ import annotations

import codecs
import os
import re
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from typing import IO, BinaryIO, Literal

from worker.contract.errors import UserFunctionError
from worker.tune.function_protocol import (
    Done,
    Failed,
    FunctionJob,
    ProtocolError,
    Report,
    encode,
    parse_child,
)
from worker.tune.user_function import Reporter, ReportRefused

# Names dropped whole: the object store's credentials (any AWS_* but the region), Ray's token (and its
# file's path), the tracking store's login.
_KEPT_AWS = frozenset({"AWS_DEFAULT_REGION", "AWS_REGION"})
_SECRET_PREFIXES = ("AWS_", "RAY_AUTH_TOKEN")
_SECRET_NAMES = frozenset({"MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"})
# ... and any name that says it holds a secret.
_SECRET_WORDS = (
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "TOKEN",
    "CREDENTIAL",
    "API_KEY",
    "ACCESS_KEY",
    "PRIVATE_KEY",
)
_LOGIN_IN_URL = re.compile(r"://[^/@\s]+:[^/@\s]*@")  # `scheme://user:password@host`: a URL holding a login
FINISH_S = 10.0  # seconds a child that said `done` gets to exit on its own before it is killed
POLL_S = 1.0  # seconds between two looks at whether a silent child still lives
JOIN_S = 5.0  # seconds to wait for the last of the child's output


def is_secret(name: str, value: str = "") -> bool:
    upper = name.upper()
    if upper in _KEPT_AWS:
        return False
    return (
        upper.startswith(_SECRET_PREFIXES)
        or upper in _SECRET_NAMES
        or any(word in upper for word in _SECRET_WORDS)
        or _LOGIN_IN_URL.search(value) is not None
    )


def function_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The child's environment: `environ` without its secrets (see `is_secret`); everything else stays
    (PATH, PYTHONPATH, CUDA_VISIBLE_DEVICES, HF_*, SMARTUNE_DATA_ROOTS, thread counts, ...), and Python's
    output is unbuffered so that the function's prints reach the trial's log as they happen."""
    kept = {name: value for name, value in environ.items() if not is_secret(name, value)}
    return kept | {"PYTHONUNBUFFERED": "1"}


def ended(returncode: int) -> str:
    """How a child that sent no last message ended, for its UserFunctionError."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"the function's process was killed by signal {name}"
    return f"the function's process ended with exit code {returncode}"


def _forward(stream: IO[bytes], name: Literal["stdout", "stderr"]) -> threading.Thread:
    """Copies the child's `stream` into this process's `sys.<name>` (looked up per write: the trial's tee)."""

    def copy() -> None:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        fd = stream.fileno()
        while chunk := os.read(fd, 65536):
            target = getattr(sys, name)
            target.write(decoder.decode(chunk))
            target.flush()
        stream.close()

    thread = threading.Thread(target=copy, name=f"function-{name}", daemon=True)
    thread.start()
    return thread


class _Lines:
    """Lines from the child's message pipe; None once the child is gone and nothing whole is left. Polls
    the process too: a grandchild that inherited the pipe must not keep a dead child's trial waiting."""

    def __init__(self, fd: int, process: subprocess.Popen[bytes]) -> None:
        self.fd, self.process, self.buffer, self.closed = fd, process, b"", False

    def next(self) -> bytes | None:
        while b"\n" not in self.buffer:
            if self.closed:
                return None
            exited = self.process.poll() is not None
            ready, _, _ = select.select([self.fd], [], [], 0 if exited else POLL_S)
            if ready:
                chunk = os.read(self.fd, 65536)
                self.buffer += chunk
                self.closed = not chunk
            elif exited:
                self.closed = True
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line


def _send(pipe: BinaryIO, message: Mapping[str, object]) -> None:
    try:
        pipe.write(encode(message))
        pipe.flush()
    except BrokenPipeError:
        pass  # the child is gone: the next read says how it ended


def run_in_child(job: FunctionJob, reporter: Reporter) -> None:
    """Runs the job's function in a child process; each of its reports goes through `reporter`. Raises
    UserFunctionError when it fails, could not be loaded or its process ended without a word (from a
    MemoryError when memory ran out: class `oom`); what `reporter` raises (Tune stopping the trial, a
    checkpoint write refused) is raised here. The child never outlives the call."""
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "worker.tune.function_child", str(to_child_r), str(from_child_w)],
            env=function_environment(os.environ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(to_child_r, from_child_w),
            start_new_session=False,
        )
    except BaseException:
        for fd in (to_child_r, to_child_w, from_child_r, from_child_w):
            os.close(fd)
        raise
    os.close(to_child_r)  # the child's ends: EOF on ours once it exits
    os.close(from_child_w)
    assert process.stdout is not None and process.stderr is not None
    forwarders = [_forward(process.stdout, "stdout"), _forward(process.stderr, "stderr")]
    finished = False
    try:
        with (
            os.fdopen(to_child_w, "wb") as to_child,
            os.fdopen(from_child_r, "rb", buffering=0) as from_child,
        ):
            _send(to_child, job.message())
            lines = _Lines(from_child.fileno(), process)
            while (line := lines.next()) is not None:
                try:
                    message = parse_child(line)
                except ProtocolError as err:  # only the function's code can have written that
                    raise UserFunctionError(f"the function's process broke its protocol: {err}") from None
                if isinstance(message, Done):
                    finished = True
                    return
                if isinstance(message, Failed):
                    finished = True
                    if message.oom:  # the class follows the cause's type (worker.contract.errors.classify)
                        raise UserFunctionError(message.message) from MemoryError(message.message)
                    raise UserFunctionError(message.message)
                assert isinstance(message, Report)
                try:
                    reporter.report(message.metrics, message.checkpoint_dir)
                except ReportRefused as err:  # the function's mistake: raised in it, where it can be caught
                    _send(to_child, {"error": str(err)})
                    continue
                _send(to_child, {"ok": True})
        try:  # its end of the pipe closed: it exited, or closed it and exits when it is done with it
            code = process.wait(FINISH_S)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
        raise UserFunctionError(ended(code))
    finally:
        _end(process, FINISH_S if finished else 0.0)
        for thread in forwarders:
            thread.join(JOIN_S)


def _end(process: subprocess.Popen[bytes], grace_s: float) -> None:
    """Waits `grace_s` for the child to exit, then kills it; reaps it either way."""
    try:
        process.wait(grace_s)
        return
    except subprocess.TimeoutExpired:
        pass
    process.kill()
    process.wait()
