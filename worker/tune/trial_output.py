"""What a trial prints, kept on its MLflow run for the dashboard's per-trial log.

Ray forwards a trial's output to the driver's log prefixed with the actor's name and pid (`(train_trial
pid=123)`), not with the trial: one reused actor runs trial after trial, so the driver's log cannot tell
whose a line is. While a trial runs, `kept_output` therefore tees its process's `sys.stdout` and
`sys.stderr`: every write still goes where it went (the worker's log, so the driver's log too) and is
also kept, the last `MAX_BYTES` of it, and logged to the trial's run as `output/start-NNN.txt` (one file
per start of the trial: a retry or a resumed attempt keeps the earlier starts' output;
worker.contract.tags.output_file) every `INTERVAL_S` seconds when something new was written, and once
more when the trial ends. A failure's traceback is added to the kept text only (Tune prints it to the
driver's log itself). Seen: prints, warnings, tracebacks, logging's default handler and any handler
that writes to `sys.stderr` as it is at the time; not seen: native writes to the file descriptors (C
extensions) and the data-parallel followers' processes.
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from worker.contract.tags import output_file

logger = logging.getLogger(__name__)

MAX_BYTES = 256 * 1024  # bytes of output kept per start (UTF-8): the dashboard shows a tail anyway
INTERVAL_S = 10.0  # seconds between two uploads of a running trial's output (only when it changed)
JOIN_S = 5.0  # seconds to wait for an upload in flight when the trial ends


class OutputTail:
    """The last `max_bytes` (UTF-8) of a text stream, kept as its writes (thread-safe)."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._chunks: deque[tuple[str, int]] = deque()  # (text, its UTF-8 bytes)
        self._size = 0
        self._lock = threading.Lock()
        self.version = 0  # writes so far: an upload is due when it moved
        self.dropped = False  # whether the front was cut
        self._mid_line = False  # whether the kept text starts inside a line (what it cut ended no line)

    def add(self, text: str) -> None:
        if not text:
            return
        data = text.encode("utf-8", "replace")
        cut = len(data) > self.max_bytes
        if cut:  # one write larger than the whole tail: its end
            text = data[-self.max_bytes :].decode("utf-8", "ignore")
            data = text.encode("utf-8")
        with self._lock:
            if cut:
                self._chunks.clear()
                self._size, self.dropped, self._mid_line = 0, True, True
            self._chunks.append((text, len(data)))
            self._size += len(data)
            while self._size > self.max_bytes:
                excess = self._size - self.max_bytes
                front, size = self._chunks[0]
                self.dropped = True
                if size <= excess:  # the oldest write goes whole
                    self._chunks.popleft()
                    self._size -= size
                    self._mid_line = not front.endswith("\n")
                    continue
                raw = front.encode("utf-8", "replace")
                kept = raw[excess:].decode("utf-8", "ignore")  # a character cut in two is dropped whole
                self._chunks[0] = (kept, len(kept.encode("utf-8")))
                self._size -= size - self._chunks[0][1]
                self._mid_line = raw[excess - 1 : excess] != b"\n"
            self.version += 1

    def text(self) -> str:
        """The kept text; once the front was cut inside a line, from the next whole line on."""
        with self._lock:
            joined = "".join(t for t, _ in self._chunks)
            mid_line = self._mid_line
        if mid_line and "\n" in joined:
            joined = joined.split("\n", 1)[1]
        return joined


class Tee:
    """A text stream that writes through to `stream` and into `tail`; everything else is `stream`'s."""

    def __init__(self, stream: TextIO, tail: OutputTail) -> None:
        self.stream, self.tail = stream, tail

    def write(self, text: str) -> int:
        written = self.stream.write(text)
        self.tail.add(text)
        return written if written is not None else len(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, isatty, ...
        return getattr(self.stream, name)


@contextmanager
def kept_output(
    client: Any, run_id: str, start: int, interval_s: float = INTERVAL_S, max_bytes: int = MAX_BYTES
) -> Iterator[OutputTail]:
    """Tee the process's stdout and stderr into a tail logged on the run `run_id` (an `MlflowClient`'s)
    as `output_file(start)`; see the module's text."""
    tail = OutputTail(max_bytes)
    path = output_file(start)
    uploaded = -1
    lock = threading.Lock()

    def upload() -> None:
        nonlocal uploaded
        with lock:
            version = tail.version
            if version == uploaded:
                return
            try:
                client.log_text(run_id, tail.text(), path)
                uploaded = version
            except Exception:  # the tracking store is away: the next round tries again
                logger.warning("could not log the output of run %s", run_id, exc_info=True)

    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval_s):
            upload()

    thread = threading.Thread(target=loop, name="trial-output", daemon=True)
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Tee(out, tail), Tee(err, tail)
    thread.start()
    try:
        yield tail
    except Exception:  # not BaseException: Tune stops a trial (ASHA) with SystemExit(0)
        tail.add(traceback.format_exc())
        raise
    finally:
        stop.set()
        thread.join(JOIN_S)
        sys.stdout, sys.stderr = out, err
        upload()
