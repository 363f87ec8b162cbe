"""Downloads from the job page: a trial's best checkpoint and the job's registered model, each a tar of
its folder streamed as it is read (no archive is built in memory or on disk first).

- `GET /ui/jobs/{id}/download/checkpoint[?trial=T]`: the trial's `best_checkpoint/` (its best epoch as a
  Hugging Face folder: safetensors, config, tokenizer; `from_pretrained` loads it), the job's best trial
  by default;
- `GET /ui/jobs/{id}/download/model[?task=X]`: this job's version of the team's registered model of the
  task (`models:/smartune-<team>-<task>/<version>`, the transformers-flavour MLflow model;
  `mlflow.transformers.load_model` loads the folder), the only task's by default.

What is downloaded is named by the job alone, never by a path from the request: the trial must be one of
the job's trials and the model one the job's summary registered under the job's own team's name
(worker.contract.model_registry), so nothing outside the team's runs and models can be asked for; the
job is found through the caller's team first (another team's is a 404). MLflow downloads into a private
temporary folder, which is removed once the answer is sent. The tar holds regular files only (links and
anything else are left out) under one top folder named for the job.
"""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import anyio
import anyio.to_thread
from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

from service.api.deps import SessionDep, SettingsDep
from service.dashboard import views
from service.dashboard.routes import PageViewer
from service.engine.tracking import Tracker
from service.errors import ApiError
from service.store import crud

router = APIRouter(prefix="/ui", include_in_schema=False)

BLOCK = tarfile.BLOCKSIZE  # 512: a tar member's header and data are padded to it
CHUNK = 1 << 20  # bytes read from a file at a time


def tar_stream(folder: Path, top: str) -> Iterator[bytes]:
    """A ustar/pax archive of the regular files below `folder`, under `top/`, produced as it reads them."""
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        info = tarfile.TarInfo(f"{top}/{path.relative_to(folder).as_posix()}")
        info.size, info.mode, info.mtime = path.stat().st_size, 0o644, int(path.stat().st_mtime)
        yield info.tobuf(format=tarfile.PAX_FORMAT)
        sent = 0
        with path.open("rb") as handle:
            while chunk := handle.read(min(CHUNK, info.size - sent)):
                sent += len(chunk)
                yield chunk
        if sent != info.size:  # the file changed while it was read: the archive would be corrupt
            raise OSError(f"{path.name} changed while it was archived")
        if pad := -info.size % BLOCK:
            yield b"\0" * pad
    yield b"\0" * (2 * BLOCK)  # the end-of-archive marker


async def _send(settings: SettingsDep, fetch: Any, top: str) -> StreamingResponse:
    """Run `fetch(tmp) -> folder | None` off the loop within MLflow's timeout; stream the folder as a tar."""
    tmp = Path(tempfile.mkdtemp(prefix="smartune-download-"))
    try:
        with anyio.fail_after(settings.mlflow_timeout_s * 10):  # a model is larger than a metric read
            folder = await anyio.to_thread.run_sync(lambda: fetch(tmp), abandon_on_cancel=True)
    except Exception as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(err, ApiError):
            raise
        raise ApiError(503, "MLflow could not give the files now; try again later") from err
    if folder is None:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ApiError(404, "nothing to download yet: the trial has logged no best checkpoint")
    return StreamingResponse(
        tar_stream(Path(folder), top),
        media_type="application/x-tar",
        headers={"Content-Disposition": f'attachment; filename="{top}.tar"'},
        background=BackgroundTask(shutil.rmtree, tmp, ignore_errors=True),
    )


@router.get("/jobs/{job_id}/download/checkpoint")
async def download_checkpoint(
    request: Request,
    job_id: str,
    session: SessionDep,
    settings: SettingsDep,
    viewer: PageViewer,
    trial: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
) -> StreamingResponse:
    """The trial's best checkpoint as `<job>-<trial>-best_checkpoint.tar` (the job's best trial by default)."""

    def find() -> tuple[str, str, str | None]:
        job = views.load_job(session, viewer.principal, job_id)
        trials = crud.job_trials(session=session, job_id=job.id)
        chosen = trial if trial is not None else views.best_trial_id(job, trials)
        if chosen is None:
            raise ApiError(404, f"job {job.id} has no scored trial yet", field="query.trial")
        if chosen not in {t.trial_id for t in trials}:
            raise ApiError(404, f"job {job.id} has no trial {chosen!r}", field="query.trial")
        experiment = job.mlflow_experiment
        session.close()
        return job.id, chosen, experiment

    found_id, chosen, experiment = await run_in_threadpool(find)
    tracker: Tracker = request.app.state.tracker
    return await _send(
        settings,
        lambda tmp: tracker.download_checkpoint(found_id, chosen, tmp, experiment),
        f"{found_id}-{chosen}-best_checkpoint",
    )


@router.get("/jobs/{job_id}/download/model")
async def download_model(
    request: Request,
    job_id: str,
    session: SessionDep,
    settings: SettingsDep,
    viewer: PageViewer,
    task: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
) -> StreamingResponse:
    """This job's version of the team's registered model of `task`, as `<name>-v<version>.tar`."""

    def find() -> dict[str, Any]:
        job = views.load_job(session, viewer.principal, job_id)
        versions = views.registered_versions(job)
        session.close()
        if not versions:
            raise ApiError(404, f"job {job.id} registered no model")
        if task is None and len(versions) > 1:
            raise ApiError(422, f"name the task: one of {', '.join(sorted(versions))}", field="query.task")
        chosen = task if task is not None else next(iter(versions))
        if chosen not in versions:
            raise ApiError(404, f"job {job.id} registered no model of task {chosen!r}", field="query.task")
        return versions[chosen]

    version = await run_in_threadpool(find)
    tracker: Tracker = request.app.state.tracker
    return await _send(
        settings,
        lambda tmp: tracker.download_model(version["name"], version["version"], tmp),
        f"{version['name']}-v{version['version']}",
    )
