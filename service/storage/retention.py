"""Checkpoint retention: what a finished job keeps of its Tune checkpoints, and for how long.

A job's Tune experiment lies in its team's Tune storage at `<job id>/trial_<trial id>/checkpoint_NNNNNN/`
(worker.tune.tuning names the trial folders; Tune numbers a trial's checkpoints in order and keeps its
newest two; `trial_state.json`, written last, marks a whole one: worker.tune.checkpoints). Once the job
has ended (SUCCEEDED, FAILED or CANCELLED, its Ray job stopped and its summary read), one pass of the
engine *prunes* it: each trial's newest whole checkpoint is kept where it serves a purpose, every other
checkpoint is deleted:
- the best trial's last checkpoint (the best trial of the summary, else of the synced trials): its best
  epoch's model is in MLflow (the run's `best_checkpoint`, the registered model); this is its full state;
- for a FAILED job, which `retry` resumes from its checkpoints, the last checkpoint of every trial not
  known to have finished (TERMINATED), so each resumes where it stopped.
`retention_days` after the job ended (the team's `checkpoint_retention_days`, else
SMARTUNE_CHECKPOINT_RETENTION_DAYS) a second pass *expires* it: the kept checkpoints are deleted too (a
retry then starts its unfinished trials from scratch; the best model stays in MLflow). Only checkpoint
folders are deleted: the experiment's state, results and parameters stay. Each pass that deletes anything
records it on the job's timeline (a transition to its own state, naming what it deleted and kept). A job
retried and ended again is pruned again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, false, or_, select
from sqlalchemy.orm import Session

from service.config import Settings
from service.storage.trees import Tree, open_tree
from service.storage.usage import human, retention_days
from service.store import crud
from service.store.db import Database
from service.store.models import FINAL_STATES, Job, JobKind, JobState, Team, Trial

logger = logging.getLogger(__name__)

PRUNED, EXPIRED = "pruned", "expired"  # jobs.retention_step
TRIAL_FOLDER = "trial_{}"  # worker.tune.tuning.trial_dir_name
CHECKPOINT_PREFIX = "checkpoint_"  # Tune's checkpoint folders, numbered in order
MANIFEST = "trial_state.json"  # worker.tune.checkpoints.MANIFEST_FILE: written last, present = whole
JOBS_PER_PASS = 50  # jobs one pass prunes or expires at most (the rest wait for the next pass)
NAMES_SHOWN = 10  # checkpoint folders named on the timeline; the rest are counted


@dataclass(frozen=True)
class Checkpoint:
    folder: str  # relative to the job's experiment folder: "trial_<id>/checkpoint_000003"
    size: int  # bytes
    whole: bool  # its manifest is there

    @property
    def trial(self) -> str:
        return self.folder.split("/")[0]


def checkpoints(tree: Tree, job_id: str) -> list[Checkpoint]:
    """The job's checkpoint folders in its Tune storage, with their bytes, sorted by folder."""
    sizes: dict[str, int] = {}
    whole: set[str] = set()
    for path, size in tree.files(job_id):
        parts = path.split("/")  # <job id>/<trial folder>/<checkpoint folder>/<file...>
        if len(parts) < 4 or not parts[2].startswith(CHECKPOINT_PREFIX):
            continue
        folder = f"{parts[1]}/{parts[2]}"
        sizes[folder] = sizes.get(folder, 0) + size
        if len(parts) == 4 and parts[3] == MANIFEST:
            whole.add(folder)
    return [Checkpoint(f, sizes[f], f in whole) for f in sorted(sizes)]


def best_trial(job: Job, trials: Sequence[Trial]) -> str | None:
    """The job's best trial id: its summary's, else the synced trial with the highest best score."""
    best = (job.summary or {}).get("best")
    if isinstance(best, dict) and best.get("trial_id"):
        return str(best["trial_id"])
    scored = [t for t in trials if t.best_score is not None and t.state != "ERROR"]
    return max(scored, key=lambda t: t.best_score or 0.0).trial_id if scored else None


def kept_trials(job: Job, trials: Sequence[Trial], folders: set[str]) -> dict[str, str]:
    """Trial folder -> why its last checkpoint is kept (see the module's text)."""
    keep: dict[str, str] = {}
    if job.state == JobState.FAILED:
        finished = {TRIAL_FOLDER.format(t.trial_id) for t in trials if t.state == "TERMINATED"}
        keep |= dict.fromkeys(sorted(folders - finished), "to resume from")
    best = best_trial(job, trials)
    if best is not None:
        keep[TRIAL_FOLDER.format(best)] = "the best trial's last"
    return keep


def prune_plan(
    found: Sequence[Checkpoint], keep: dict[str, str]
) -> tuple[list[tuple[Checkpoint, str]], list[Checkpoint]]:
    """(kept with why, deleted): the newest whole checkpoint (else the newest) of each kept trial stays."""
    kept: list[tuple[Checkpoint, str]] = []
    for trial, why in keep.items():
        mine = [c for c in found if c.trial == trial]
        if mine:
            kept.append((max([c for c in mine if c.whole] or mine, key=lambda c: c.folder), why))
    chosen = {c.folder for c, _ in kept}
    return kept, [c for c in found if c.folder not in chosen]


def due(job: Job, days: float, now: datetime) -> str | None:
    """The step a finished job is due for: PRUNED, EXPIRED (its retention days have passed), or None."""
    if job.finished_at is None:
        return None
    expired = job.finished_at + timedelta(days=days) <= now
    ended_since = job.retention_at is None or job.retention_at < job.finished_at  # new, or retried and ended
    if ended_since:
        return EXPIRED if expired else PRUNED
    return EXPIRED if job.retention_step == PRUNED and expired else None


def _names(found: Sequence[Checkpoint]) -> str:
    shown = ", ".join(c.folder for c in found[:NAMES_SHOWN])
    return shown + (f" and {len(found) - NAMES_SHOWN} more" if len(found) > NAMES_SHOWN else "")


def describe(
    step: str, deleted: Sequence[Checkpoint], kept: Sequence[tuple[Checkpoint, str]], days: float
) -> str:
    """The timeline's line for a pass that deleted `deleted` (relative folder names only: no paths)."""
    size = human(sum(c.size for c in deleted))
    trials = len({c.trial for c in deleted})
    if step == EXPIRED:
        return (f"checkpoint retention: {days:g} days after the job ended, deleted its {len(deleted)} remaining "
                f"checkpoint(s) of {trials} trial(s) ({size}): {_names(deleted)}; its best model stays in MLflow")  # fmt: skip
    line = f"checkpoint retention: deleted {len(deleted)} checkpoint(s) of {trials} trial(s) ({size}): {_names(deleted)}"
    if kept:
        what = "; ".join(f"{c.folder} ({why})" for c, why in kept[:NAMES_SHOWN])
        line += f"; kept for {days:g} days: {what}" + (
            f" and {len(kept) - NAMES_SHOWN} more" if len(kept) > NAMES_SHOWN else ""
        )
    return line  # fmt: skip


def _fresh(session: Session) -> list[str]:
    """Finished sweeps not pruned since they last ended, oldest first."""
    query = (
        select(Job.id)
        .where(*_settled(), or_(Job.retention_at.is_(None), Job.retention_at < Job.finished_at))
        .order_by(Job.finished_at)
        .limit(JOBS_PER_PASS)
    )
    return list(session.scalars(query))


def _settled() -> list[ColumnElement[bool]]:
    return [Job.state.in_(FINAL_STATES), Job.kind == JobKind.SWEEP, Job.finished_at.is_not(None),
            Job.cleanup_pending == false(), Job.summary_pending == false()]  # fmt: skip


def _expiring(session: Session, settings: Settings, now: datetime) -> list[str]:
    """Pruned jobs whose team's retention days have passed, oldest first (three columns per job)."""
    days = {t.id: retention_days(t, settings) for t in session.scalars(select(Team))}
    query = (
        select(Job.id, Job.team_id, Job.finished_at)
        .where(*_settled(), Job.retention_step == PRUNED, Job.retention_at >= Job.finished_at)
        .order_by(Job.finished_at)
    )
    due = [i for i, team, end in session.execute(query) if end and end + timedelta(days=days[team]) <= now]
    return due[:JOBS_PER_PASS]


def run(db: Database, settings: Settings, now: datetime) -> int:
    """One pass over the jobs due (at most JOBS_PER_PASS of each step); returns checkpoints deleted. A job
    whose storage fails is logged and tried again at the next pass."""
    with db.sessions() as session:
        jobs = _fresh(session) + _expiring(session, settings, now)
    deleted = 0
    for job_id in dict.fromkeys(jobs):
        try:
            deleted += apply(db, settings, job_id, now)
        except Exception:
            logger.exception(
                "checkpoint retention of job %s failed; it is tried again at the next pass", job_id
            )
    return deleted


def apply(db: Database, settings: Settings, job_id: str, now: datetime) -> int:
    """Prune or expire one job if it is due: delete, then record (only if the job has not changed)."""
    with db.sessions() as session:  # read, then closed: the walk holds no transaction
        job = crud.get_job(session=session, job_id=job_id, team_id=None)
        step = None if job is None else due(job, retention_days(job.team, settings), now)
        if job is None or step is None:
            return 0
        days = retention_days(job.team, settings)
        trials = crud.job_trials(session=session, job_id=job_id)
        tree = open_tree(settings.team_storage(job.team.name))
        ended, state = job.finished_at, job.state
    found = checkpoints(tree, job_id) if tree is not None else []
    keep = kept_trials(job, trials, {c.trial for c in found}) if step == PRUNED else {}
    kept, doomed = prune_plan(found, keep)
    for checkpoint in doomed:
        assert tree is not None
        tree.remove(f"{job_id}/{checkpoint.folder}")

    def record(session: Session, job: Job) -> None:
        job.retention_step = PRUNED if kept else EXPIRED
        job.retention_at = now
        if doomed:
            crud.record_transition(session=session, job=job, from_state=job.state,
                                   reason=describe(step, doomed, kept, days))  # fmt: skip

    crud.update_job_if(sessions=db.write_sessions, job_id=job_id,
                       check=lambda j: j.finished_at == ended and j.state == state, change=record)  # fmt: skip
    return len(doomed)
