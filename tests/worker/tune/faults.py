"""Faults from outside a running sweep, for the fault tests: nothing in the production code knows of them.

A `TrialWatcher` thread polls the job's MLflow runs until the trial it aims at (chosen by its params) has
started, checks that the pid on its run (`smartune.pid`) is a live Ray actor process (`ray::...` in
/proc), and then does one thing to that process or to its storage from this process: lower a resource
limit with `prlimit(2)`, plant a folder the trial cannot write, ... Every other trial is left alone.
"""

from __future__ import annotations

import contextlib
import resource
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Run

from worker.tune.settings import Settings

Action = Callable[[Run, int], dict[str, Any]]  # (the trial's run, its process id) -> what was done


def process_title(pid: int) -> str:
    """The process's title (Ray's actors set theirs to `ray::<class>.<method>`)."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()


def training(run: Run) -> bool:
    """Whether the trial has built its model and logged its training data (worker.tune.telemetry): it is
    past starting its threads (a thread started under an exhausted address space can hang CPython's
    `Thread.start` for good, never raising) and about to allocate for its first steps."""
    return bool(run.inputs and run.inputs.dataset_inputs)


def mapped_bytes(pid: int) -> int:
    """The process's virtual memory size (VmSize), the quantity RLIMIT_AS caps."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise LookupError(f"no VmSize for process {pid}")


class TrialWatcher(threading.Thread):
    """Waits for the trial whose params include `params` to start, then runs `action` on it once."""

    def __init__(
        self,
        settings: Settings,
        job_id: str,
        params: Mapping[str, str],
        action: Action,
        ready: Callable[[Run], bool] = lambda _run: True,
    ) -> None:
        """`ready`: what the trial's run must show before the action (by default, only its pid)."""
        super().__init__(daemon=True)
        self.settings, self.job_id, self.params, self.action = settings, job_id, dict(params), action
        self.ready = ready
        self.done: dict[str, Any] = {}
        self.error: BaseException | None = None

    def _aimed_run(self, client: MlflowClient) -> Run | None:
        experiment = client.get_experiment_by_name(self.settings.experiment)
        if experiment is None:
            return None
        for run in client.search_runs(
            [experiment.experiment_id], f"tags.`smartune.job_id` = '{self.job_id}'"
        ):
            tags, params = run.data.tags, run.data.params
            aimed = "smartune.pid" in tags and all(params.get(k) == v for k, v in self.params.items())
            if aimed and self.ready(run):
                return run
        return None

    def run(self) -> None:
        try:
            client = MlflowClient(self.settings.tracking_uri)
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and not self.done:
                run = self._aimed_run(client)
                if run is not None:
                    pid = int(run.data.tags["smartune.pid"])
                    title = process_title(pid)
                    assert title.startswith("ray::"), title  # the trial's Ray actor, not some other process
                    self.done = {
                        "run_id": run.info.run_id,
                        "pid": pid,
                        "title": title,
                        **self.action(run, pid),
                    }
                time.sleep(0.1)  # a poll costs about 4 ms of CPU (an MLflow query)
        except BaseException as err:  # reported by the test (a thread's exception is otherwise lost)
            self.error = err


def limit_address_space(headroom: int) -> Action:
    """Caps the process's virtual memory at what it maps now plus `headroom` bytes (RLIMIT_AS; a negative
    headroom caps it below: no new mapping fits until the process unmaps that much): its next large
    allocation fails as on a host whose memory ran out."""

    def act(_run: Run, pid: int) -> dict[str, Any]:
        limit = mapped_bytes(pid) + headroom
        resource.prlimit(pid, resource.RLIMIT_AS, (limit, limit))
        return {"limit": limit}

    return act


def limit_file_size(size: int) -> Action:
    """Caps the size of any file the process writes (RLIMIT_FSIZE): a write past `size` bytes fails with
    EFBIG, as a write to a full disk fails with ENOSPC (Python ignores the SIGXFSZ that comes with it)."""

    def act(_run: Run, pid: int) -> dict[str, Any]:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (size, size))
        return {"limit": size}

    return act


def immutable(folder: Path) -> None:
    """Makes `folder` immutable (`chattr +i`): no one, root included, can create a file in it."""
    subprocess.run(["chattr", "+i", str(folder)], check=True, capture_output=True)


def mutable(folder: Path) -> None:
    if folder.exists():
        subprocess.run(["chattr", "-i", str(folder)], check=False, capture_output=True)


def can_make_immutable(scratch: Path) -> bool:
    """Whether `chattr +i` works here (root or CAP_LINUX_IMMUTABLE, and a file system that supports it)."""
    probe = scratch / "immutable-probe"
    probe.mkdir(parents=True, exist_ok=True)
    try:
        immutable(probe)
    except (OSError, subprocess.CalledProcessError):
        return False
    try:
        with contextlib.suppress(OSError):
            (probe / "x").touch()
            return False  # the flag did not stop a write
        return True
    finally:
        mutable(probe)


@contextlib.contextmanager
def unlocked(folders: list[Path]) -> Iterator[None]:
    """Clears the immutable flag of every folder in `folders` on the way out (so tmp_path can be removed)."""
    try:
        yield
    finally:
        for folder in folders:
            mutable(folder)
