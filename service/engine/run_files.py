"""Files of a job's MLflow runs that the dashboard hands out: what a trial printed (its run's `output/`
folder, one `start-NNN.txt` per start: worker.tune.trial_output), the best epoch's checkpoint of a trial
(`best_checkpoint/`, a Hugging Face folder) and a registered model version's files.

Plain functions on an `MlflowClient` (the service's) and a trial's run, which `MlflowTracker` finds by the
contract's tags; MLflow is imported lazily. Nothing here decides who may read what: the dashboard's routes
find the job through the caller's team first.
"""

from __future__ import annotations

import posixpath
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.contract.tags import BEST_CHECKPOINT, TRIAL_OUTPUT

OPEN_RUN_STATUSES = ("RUNNING", "SCHEDULED")


@dataclass(frozen=True)
class TrialOutput:
    text: str  # the last `max_bytes` of what the trial's starts printed, oldest first, each under a header
    starts: list[int]  # the starts whose output is kept (1, 2, ...)
    truncated: bool  # whether older output was left out
    running: bool  # whether the trial's run is still open (its output may grow)


def _start_number(path: str) -> int | None:
    name = posixpath.basename(path)
    if not (name.startswith("start-") and name.endswith(".txt")):
        return None
    digits = name[len("start-") : -len(".txt")]
    return int(digits) if digits.isdigit() else None


def trial_output(client: Any, run: Any, max_bytes: int) -> TrialOutput:
    """The run's kept output, the newest starts first until `max_bytes` (UTF-8) are read, shown in order."""
    files = sorted(
        ((n, f.path) for f in client.list_artifacts(run.info.run_id, TRIAL_OUTPUT)
         if not f.is_dir and (n := _start_number(f.path)) is not None),
        reverse=True,
    )  # fmt: skip
    parts: list[tuple[int, str]] = []
    budget, truncated = max_bytes, False
    with tempfile.TemporaryDirectory() as tmp:
        for number, path in files:
            if budget <= 0:
                truncated = True
                break
            data = Path(client.download_artifacts(run.info.run_id, path, tmp)).read_bytes()
            if len(data) > budget:  # this start's newest lines; nothing older
                data, truncated = data[-budget:], True
                cut = data.find(b"\n")
                data = data[cut + 1 :] if cut >= 0 else data
                budget = 0
            budget -= len(data)
            parts.append((number, data.decode("utf-8", "replace")))
    parts.reverse()
    text = "".join(f"--- start {n} ---\n{body}" + ("" if body.endswith("\n") else "\n") for n, body in parts)
    return TrialOutput(
        text=text,
        starts=[n for n, _ in parts],
        truncated=truncated,
        running=run.info.status in OPEN_RUN_STATUSES,
    )


def download_checkpoint(client: Any, run: Any, dst: Path) -> Path | None:
    """The run's `best_checkpoint/` folder downloaded into `dst`; None when it logged none (yet)."""
    if not any(f.is_dir and f.path == BEST_CHECKPOINT for f in client.list_artifacts(run.info.run_id)):
        return None
    return Path(client.download_artifacts(run.info.run_id, BEST_CHECKPOINT, str(dst)))


def download_model(client: Any, tracking_uri: str, name: str, version: str, dst: Path) -> Path:
    """The files of version `version` of the registered model `name` downloaded into `dst` (from where the
    registry says they are: the logged model's artifacts, or a tracking server's proxied store)."""
    from mlflow.artifacts import download_artifacts

    location = client.get_model_version_download_uri(name, version)
    return Path(download_artifacts(artifact_uri=location, dst_path=str(dst), tracking_uri=tracking_uri))
