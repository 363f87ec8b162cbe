"""Dispatch: run the scheduler on the job store and hand admitted jobs to Ray as a new attempt.

The attempt is recorded (SUBMITTING) in the job store before Ray is called; its submission id is
`<job id>-a<n>`, so re-submitting after a crash or a lost reply can only ever reach Ray once (Ray refuses
a known id). The Ray job runs the sweep driver with the spec inline, as the sweep contract says.
"""

from __future__ import annotations

import json
import logging
import os
import shlex

from sqlalchemy import bindparam, update
from sqlalchemy.orm import Session

from service import audits
from service.config import Settings
from service.engine import pool
from service.engine.autoscaler import Autoscaler
from service.engine.mlflow_teams import TeamAccess
from service.engine.ray_jobs import RayJobError, RayJobExists, RayJobs, RayUnavailable
from service.engine.scheduler import Plan, Resources
from service.http.logs import bound_job
from service.store import crud
from service.store.db import Database, utcnow
from service.store.models import Attempt, AttemptState, Job, JobKind, JobState, submission_id
from worker.contract.model_registry import TEAM_ENV
from worker.contract.node_types import NODE_TYPES_ENV, RESOURCES_GRACE_ENV, dump_node_types
from worker.contract.spec import PLAN_DIGEST_ENV
from worker.contract.tags import ATTEMPT, JOB, SPEC_HASH, TEAM

logger = logging.getLogger(__name__)

PASSED_THROUGH = ("TOKENIZERS_PARALLELISM",)
# Seconds a driver reads a cluster found short of its trial again before failing: after a Ray head
# restart, compose's worker rejoined 22-35 s after the head (docs/deployment.md)
RESOURCES_GRACE_S = 120.0


def submission(job: Job, number: int, settings: Settings) -> tuple[str, dict[str, str], dict[str, str]]:
    """The entrypoint, environment and metadata of one attempt (the sweep driver's contract).

    Each team has its own Tune storage (checkpoints are unpickled on load), MLflow experiment and registered
    models, and, where the deployment has MLflow users per team, its own MLflow login; the worker re-checks
    every file against the team's data roots; the hub is off unless the deployment allows some of it (the
    spec's hub ids were checked against that list at submission)."""
    python = settings.entrypoint_python or "python"
    entrypoint = f"{shlex.quote(python)} -m {settings.sweep_module} --job-id {job.id} --attempt {number}"
    if job.kind == JobKind.AUDIT:
        entrypoint = audits.entrypoint(job, python)
    offline = "0" if settings.hub_allow else "1"
    env = {
        "SMARTUNE_JOB_SPEC": job.spec_json,
        "SMARTUNE_STORAGE_PATH": settings.team_storage(job.team.name),
        "MLFLOW_TRACKING_URI": settings.tracking_uri,
        "SMARTUNE_MLFLOW_EXPERIMENT": settings.team_experiment(job.team.name),
        TEAM_ENV: job.team.name,  # its registered models: smartune-<team>-<task> (worker.contract.model_registry)
        "SMARTUNE_DATA_DIR": str(settings.data_dir),
        "SMARTUNE_DATASET_STORE": settings.dataset_store_uri,  # where trials fetch uploaded datasets by digest
        "SMARTUNE_TRIAL_PLACEMENT": settings.trial_placement,  # worker.tune.placement
        "SMARTUNE_UNPLACEABLE_TIMEOUT_S": f"{settings.unplaceable_timeout_s:g}",  # worker.tune.unplaceable_guard
        # the pool held the job's trials when it was admitted: a driver that finds the cluster short reads
        # it again this long before failing (nodes rejoining a restarted head: worker.tune.placement)
        RESOURCES_GRACE_ENV: f"{RESOURCES_GRACE_S:g}",
        "SMARTUNE_DATA_ROOTS": os.pathsep.join(str(r) for r in settings.allowed_roots(job.team.data_roots)),
        "HF_HUB_OFFLINE": offline,
        "TRANSFORMERS_OFFLINE": offline,
    }
    if settings.glue_dir is not None:
        env["SMARTUNE_GLUE_DIR"] = str(settings.glue_dir)
    if settings.autoscaled_node_types:  # the driver waits for the autoscaler's nodes instead of refusing
        env["SMARTUNE_WAIT_FOR_RESOURCES"] = "1"  # worker.tune.placement, worker.tune.unplaceable_guard
        env[NODE_TYPES_ENV] = dump_node_types(settings.autoscaled_node_types)
    login = settings.team_mlflow_login(job.team.name)
    if login is not None:  # the team's own MLflow user (service.engine.mlflow_teams), never the admin's
        env["MLFLOW_TRACKING_USERNAME"], env["MLFLOW_TRACKING_PASSWORD"] = login
    digest = (job.estimate or {}).get("plan_digest")
    if isinstance(digest, str):  # the trials planned at submission; the driver refuses to run others
        env[PLAN_DIGEST_ENV] = digest
    env |= {name: value for name in PASSED_THROUGH if (value := os.environ.get(name)) is not None}
    metadata = {
        JOB: job.id,
        ATTEMPT: str(number),
        TEAM: job.team.name,
        SPEC_HASH: job.spec_hash,
    }
    return entrypoint, env, metadata


def spec_tasks(spec_json: str) -> list[str]:
    """The tasks a stored spec names (its `task`: one name or a list), as the contract spells them."""
    task = json.loads(spec_json).get("task") or []
    return [str(t).lower() for t in ([task] if isinstance(task, str) else task)]


class Dispatcher:
    def __init__(
        self, *, db: Database, ray: RayJobs, settings: Settings, access: TeamAccess | None = None
    ) -> None:
        self.db, self.ray, self.settings = db, ray, settings
        self.access = access  # MLflow per team (service.engine.mlflow_teams); None: no users to provision

    def schedule(self, capacity: Resources | None) -> Plan:
        """One scheduling round: dispatch the admitted jobs, record every other job's wait reason."""
        autoscaler = Autoscaler.of(self.settings.autoscaled_node_types)
        with self.db.sessions() as session:
            state = pool.load(
                session,
                default_max_jobs=self.settings.default_max_concurrent_jobs,
                capacity=pool.reach(capacity, autoscaler),
                default_gpu_quota=self.settings.default_gpu_quota,
                default_cpu_quota=self.settings.default_cpu_quota,
            )
        decided = pool.plan_round(state, capacity, autoscaler)
        admitted = set(decided.admitted)
        changed = [
            {"jid": job_id, "reason": reason[:300]}
            for job_id, reason in decided.reasons.items()
            if job_id not in admitted and state.wait_reasons.get(job_id) != reason
        ]
        if changed:
            query = (
                update(Job)
                .where(Job.id == bindparam("jid"), Job.state == JobState.QUEUED)
                .values(wait_reason=bindparam("reason"))
            )
            with self.db.write_sessions() as session, session.begin():
                session.connection().execute(query, changed)
        # Reasons first, then admissions (each a Ray submission, seconds on a busy dashboard): whoever sees
        # a job of this round dispatched also sees why the others of the round wait.
        for job_id in decided.admitted:
            with bound_job(job_id):
                if job_id in decided.waits:  # dispatched all the same: its driver waits for the node
                    logger.info("job %s: %s", job_id, decided.waits[job_id])
                self.dispatch(job_id, decided.reasons[job_id])
        return decided

    def dispatch(self, job_id: str, reason: str) -> None:
        number = 0

        def change(session: Session, job: Job) -> None:
            nonlocal number
            job.attempt = number = job.attempt + 1
            job.mlflow_experiment = self.settings.team_experiment(job.team.name)
            session.add(Attempt(job_id=job.id, number=number, submission_id=submission_id(job.id, number)))
            job.wait_reason = None
            crud.set_state(session=session, job=job, state=JobState.DISPATCHED, reason=reason)

        if crud.update_job_if(
            sessions=self.db.write_sessions,
            job_id=job_id,
            check=lambda j: j.state == JobState.QUEUED,
            change=change,
        ):
            self.submit(job_id, number)

    def submit(self, job_id: str, number: int) -> None:
        """Hand attempt `number` to Ray (again, if it was recorded but never accepted)."""
        with self.db.sessions() as session:
            job = crud.get_job(session=session, job_id=job_id, team_id=None)
            if job is None or job.state != JobState.DISPATCHED or job.attempt != number:
                return  # cancelled meanwhile
            entrypoint, env, metadata = submission(job, number, self.settings)
            job_kind, cpus, gpus = job.kind, job.cpus_per_trial, job.gpus_per_trial
            team, tasks = job.team.name, spec_tasks(job.spec_json)
        this_attempt = lambda j: j.attempt == number  # noqa: E731
        if self.access is not None:
            try:  # the team's MLflow user and registered models first: the job logs in as the team
                self.access.ensure(team, tasks)
            except Exception as err:  # stays SUBMITTING: the watcher submits it again on a later round
                logger.warning("dispatch of %s-a%d postponed: MLflow access of team %s: %s", job_id, number,
                               team, err)  # fmt: skip
                return
        try:
            self.ray.submit(
                submission_id=submission_id(job_id, number),
                entrypoint=entrypoint,
                env_vars=env,
                metadata=metadata,
                **driver_resources(job_kind, cpus, gpus),
            )
        except RayJobExists:
            pass  # accepted before (a lost reply, or a restart): it runs once
        except RayUnavailable as err:  # stays SUBMITTING: the watcher submits it (same id) once Ray answers
            logger.warning("dispatch of %s-a%d postponed: %s", job_id, number, err)
            return
        except RayJobError as err:
            error = str(err)
            refused = lambda s, j: self._refused(s, j, error)  # noqa: E731
            crud.update_job_if(
                sessions=self.db.write_sessions, job_id=job_id, check=this_attempt, change=refused
            )
            return
        crud.update_job_if(
            sessions=self.db.write_sessions, job_id=job_id, check=this_attempt, change=mark_submitted
        )
        logger.info("dispatched %s as Ray job %s", job_id, submission_id(job_id, number))

    @staticmethod
    def _refused(session: Session, job: Job, error: str) -> None:
        attempt = crud.current_attempt(session=session, job=job)
        attempt.state, attempt.message, attempt.ended_at = AttemptState.FAILED, error, utcnow()
        job.message = f"Ray refused the job: {error}"
        crud.set_state(session=session, job=job, state=JobState.FAILED, reason=job.message)


def driver_resources(kind: str, cpus: float, gpus: float) -> dict[str, float]:
    """What the Ray job's driver reserves: nothing for a sweep (its trials reserve theirs through Tune);
    an audit re-trains in its driver, so it holds a trial's CPUs and GPUs (a GPU trial's audit gets one)."""
    if kind == JobKind.AUDIT:
        return {"entrypoint_cpus": cpus, "entrypoint_gpus": gpus}
    return {}


def mark_submitted(session: Session, job: Job) -> None:
    attempt = crud.current_attempt(session=session, job=job)
    if attempt.state == AttemptState.SUBMITTING:
        attempt.state, attempt.submitted_at = AttemptState.SUBMITTED, utcnow()
