"""The entrypoints' exit: what they wrote reaches the pipe before the process ends without its teardown."""

from __future__ import annotations

import io
import logging
import sys

import pytest

from worker.tune import process_exit


class _Buffered(io.StringIO):
    """A stream that keeps what it was given until flushed, as a pipe's buffer does."""

    def __init__(self) -> None:
        super().__init__()
        self.pending, self.delivered = "", ""

    def write(self, text: str) -> int:
        self.pending += text
        return len(text)

    def flush(self) -> None:
        self.delivered, self.pending = self.delivered + self.pending, ""


def test_the_summary_line_and_the_log_are_flushed_before_the_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    out, err = _Buffered(), _Buffered()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    exits: list[int] = []
    monkeypatch.setattr(process_exit.os, "_exit", exits.append)
    shutdowns: list[bool] = []
    monkeypatch.setattr(logging, "shutdown", lambda: shutdowns.append(True))
    print('{"job_id": "j"}')
    print("a warning", file=sys.stderr)

    process_exit.exit_at_once(3)

    assert (out.delivered, err.delivered, out.pending) == ('{"job_id": "j"}\n', "a warning\n", "")
    assert exits == [3] and shutdowns == [True]


def test_a_closed_pipe_does_not_keep_the_process_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    closed = io.StringIO()
    closed.close()  # flush() raises ValueError, as on a reader that went away
    monkeypatch.setattr(sys, "stdout", closed)
    exits: list[int] = []
    monkeypatch.setattr(process_exit.os, "_exit", exits.append)
    monkeypatch.setattr(logging, "shutdown", lambda: None)

    process_exit.exit_at_once(0)

    assert exits == [0]
