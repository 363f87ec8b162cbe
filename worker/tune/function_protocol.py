"""The messages between a function trial's process and the child process that runs the user's function
(worker.tune.function_process, worker.tune.function_child): one JSON object per line, over two pipes.

Parent to child: first the job (`FunctionJob.message()`), then one reply per report: `{"ok": true}`, or
`{"error": "..."}` when the trial's reporter refused it (the child raises it as a ValueError inside the
function's call). Child to parent: `{"report": {name: number}, "checkpoint_dir": path | null}` per epoch
(then it waits for the reply: epochs and checkpoints stay in order), and last `{"done": true}` or
`{"error": "<the UserFunctionError's message>", "oom": bool}`. Pure: no process, no pipe here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


class ProtocolError(ValueError):
    """A line that is not one of the messages above (the child's end was written to by something else)."""


@dataclass(frozen=True)
class FunctionJob:
    """What the child runs: the function, its values and roots, and how the trial seeded its generators."""

    entrypoint: str  # `module:attr`
    config: dict[str, Any]  # the function's `config` (worker.tune.user_function.user_config)
    roots: list[str]  # the function's `data_roots`
    checkpoint: str | None  # the folder a restarted trial resumes from (`reporter.checkpoint`)
    seed: int
    deterministic: bool
    threads: int  # torch's intra-op threads, as in the trial's process (what its provenance records)
    path: list[str]  # the trial's `sys.path`: where the function's module was importable from

    def message(self) -> dict[str, Any]:
        return {"job": asdict(self)}

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> FunctionJob:
        if not isinstance(message.get("job"), dict):
            raise ProtocolError(f"expected the job, got {sorted(message)}")
        return cls(**message["job"])


@dataclass(frozen=True)
class Report:
    """One epoch the function reported (its values not checked yet: the trial's Reporter does that)."""

    metrics: dict[str, Any]
    checkpoint_dir: Path | None


@dataclass(frozen=True)
class Done:
    """The function returned."""


@dataclass(frozen=True)
class Failed:
    """The function raised (or could not be loaded): the UserFunctionError's message; `oom` when it was
    the memory running out (the trial keeps that class)."""

    message: str
    oom: bool = False


ChildMessage = Report | Done | Failed


def encode(message: Mapping[str, Any]) -> bytes:
    """One line. NaN and infinities pass (Python's JSON reads them back): a diverged metric is a value."""
    return json.dumps(message, separators=(",", ":")).encode("utf-8") + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError as err:
        raise ProtocolError(f"not JSON: {line[:200]!r}") from err
    if not isinstance(value, dict):
        raise ProtocolError(f"not a JSON object: {line[:200]!r}")
    return value


def parse_child(line: bytes) -> ChildMessage:
    """A line from the child as one of its three messages."""
    message = decode(line)
    if "report" in message:
        metrics, folder = message["report"], message.get("checkpoint_dir")
        if not isinstance(metrics, dict) or not (folder is None or isinstance(folder, str)):
            raise ProtocolError(f"malformed report: {line[:200]!r}")
        return Report(metrics, Path(folder) if folder is not None else None)
    if message.get("done") is True:
        return Done()
    if isinstance(message.get("error"), str):
        return Failed(message["error"], bool(message.get("oom", False)))
    raise ProtocolError(f"unknown message: {line[:200]!r}")


def parse_reply(line: bytes) -> str | None:
    """The parent's reply to a report: None when it was taken, else why the trial refused it."""
    message = decode(line)
    if message.get("ok") is True:
        return None
    if isinstance(message.get("error"), str):
        return str(message["error"])
    raise ProtocolError(f"unknown reply: {line[:200]!r}")


def report_message(metrics: Mapping[str, float], checkpoint_dir: str | None) -> dict[str, Any]:
    return {"report": dict(metrics), "checkpoint_dir": checkpoint_dir}


def failure_message(message: str, oom: bool) -> dict[str, Any]:
    return {"error": message, "oom": oom}
