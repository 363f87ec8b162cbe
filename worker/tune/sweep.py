"""The sweep driver: one job spec in, a Ray Tune grid out, every trial recorded in MLflow.

`python -m worker.tune.sweep --job-id JOB --attempt N` is what a Ray job runs (spec JSON in
`SMARTUNE_JOB_SPEC`, or `--spec-json JSON`, or `--spec FILE` in YAML or JSON); `smartune sweep` calls
`run_sweep` for a local run. The Tune experiment is named after the job id under the storage path, so
attempt N+1 restores attempt N's experiment (unfinished and errored trials resume from their last
checkpoints) instead of starting over. At the end each task's best model becomes this job's version of the
team's registered model `smartune-<team>-<task>` (team: `SMARTUNE_TEAM`, `local` by hand), whose alias
`best` moves only to a better dev score on the same dev rows (worker.tune.job_models; the summary's
`registered_model` says which version, or why not). Exit codes: 0 when the sweep ran and at least one trial completed
(the summary JSON is the last line of stdout), 3 when it ran but no trial completed (the summary still
comes last; the reason is on stderr), 2 for an invalid spec (before Ray starts), 1 when the sweep could
not run, 130 when interrupted (rerun the same job id to resume).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import ray
from mlflow import MlflowClient
from ray import tune

from worker.contract.outcome import completed_trials, no_result_reason
from worker.contract.spec import PLAN_DIGEST_ENV, JobSpec
from worker.contract.specfile import SpecError, spec_from_file, spec_from_text
from worker.contract.tags import ERROR_MESSAGE
from worker.training.files import confinement_environment
from worker.tune.callbacks import TrialStateCallback
from worker.tune.checkpoints import ensure_restorable
from worker.tune.function_trial import FunctionRun
from worker.tune.job_models import register_job_models
from worker.tune.outcomes import collect_outcomes, main_metric_of
from worker.tune.placement import autoscaled_node_rows, check_resources, trial_resources
from worker.tune.preflight import preflight
from worker.tune.process_exit import exit_at_once
from worker.tune.progress import LiveTable
from worker.tune.settings import Settings
from worker.tune.shared_data import share_data
from worker.tune.stall_guard import StallGuard
from worker.tune.startup_clock import process_age_s
from worker.tune.summary import build_summary, summary_metrics
from worker.tune.telemetry import system_metrics_interval
from worker.tune.tracking import (
    SpecMismatchError,
    TrackingTarget,
    clear_tags,
    close_stale_children,
    ensure_experiment,
    log_metrics,
    open_parent,
)
from worker.tune.trainable import TrialContext, train_trial
from worker.tune.tuning import (
    AloneAfterOom,
    TrialResolver,
    alone,
    cell_axes,
    data_trials,
    gpu_memory_per_gpu,
    node_cpus,
    param_space,
    resources,
    run_config,
    trial_configs,
    tune_config,
)
from worker.tune.unplaceable_guard import UnplaceableGuard

SPEC_ENV = "SMARTUNE_JOB_SPEC"
NO_RESULT = 3  # exit code of a sweep that ran but whose every trial failed
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
logger = logging.getLogger("smartune.sweep")


class SweepInterrupted(RuntimeError):
    """The sweep stopped before all trials ended (Ctrl+C); its state is saved and resumable."""


def default_job_id(spec: JobSpec) -> str:
    """A local run's job id: the spec's name (or `sweep`) and its hash, so rerunning a spec resumes it."""
    stem = "".join(c if c.isalnum() or c in "-_" else "-" for c in (spec.name or "sweep"))[:60]
    return f"{stem}-{spec.spec_hash()[:10]}"


def check_job_id(job_id: str) -> str:
    """A job id names a folder (the Tune experiment) and is matched in MLflow filters: keep it plain."""
    if not _JOB_ID.fullmatch(job_id):
        raise SpecError(f"--job-id: {job_id!r} must be 1-128 letters, digits, '.', '_' or '-'")
    return job_id


def load_spec(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> JobSpec:
    if args.spec_json:
        return spec_from_text(args.spec_json, "--spec-json")
    if args.spec:
        return spec_from_file(Path(args.spec))
    if environ.get(SPEC_ENV):
        return spec_from_text(environ[SPEC_ENV], SPEC_ENV)
    raise SpecError(f"no job spec: pass --spec FILE or --spec-json JSON, or set {SPEC_ENV}")


def check_plan(spec: JobSpec, environ: Mapping[str, str] = os.environ) -> None:
    """The trials this driver expands from the spec are the ones the control plane planned and priced:
    it passes their digest in PLAN_DIGEST_ENV (absent for a local run or a job queued before it did)."""
    planned = environ.get(PLAN_DIGEST_ENV)
    if planned and spec.plan_digest() != planned:
        raise SpecError(
            f"{PLAN_DIGEST_ENV}: this worker expands the spec into other trials than the control plane "
            f"planned (plan {spec.plan_digest()[:12]}, planned {planned[:12]}): the two run different "
            "versions of worker.contract"
        )


def connect_ray() -> bool:
    """Ray as the contract says: `RAY_ADDRESS` if set, else the running one (tests), else a local one.
    Returns whether this process connected (and so disconnects at the end)."""
    if ray.is_initialized():
        return False
    address = os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address)
    else:  # "local": start one even when a `ray start` cluster runs on this machine (only RAY_ADDRESS joins)
        ray.init(address="local", include_dashboard=False)
    return True


def run_sweep(
    spec: JobSpec,
    *,
    job_id: str,
    attempt: int = 1,
    settings: Settings | None = None,
    table: TextIO | None = None,
    startup: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Runs (or resumes) the sweep on the connected Ray cluster and returns its summary. `startup`: the
    driver process's start-up so far (seconds), logged on the parent run with `driver_ready_seconds`, its
    age once the parent run is open."""
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # Tune's own console output off (verbose=0)
    # One small checkpoint per epoch is the design here, not a bottleneck to warn about.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    settings = settings or Settings.from_env()
    settings.prepare()
    nodes = ray.nodes() + autoscaled_node_rows()  # with an autoscaler, its node types count before one is up
    per_gpu = gpu_memory_per_gpu(nodes)  # MiB of the smallest advertised GPU; None: trials pack by `gpus`
    request = resources(spec, per_gpu)
    if spec.resources.gpus and "gpu_memory_mb" not in request:
        logger.warning("trials are packed by their GPU fraction only: %s", "no node advertises gpu_memory_mb"
                       if per_gpu is None else "the spec names no resources.gpu_memory_mb")  # fmt: skip
    check_resources(spec, request)
    trials, axes = trial_configs(spec, spec.resources.cpus), cell_axes(spec)
    client = MlflowClient(tracking_uri=settings.tracking_uri)
    target = TrackingTarget(
        settings.tracking_uri, ensure_experiment(client, settings.experiment, settings.artifact_root), job_id
    )
    path = settings.experiment_path(job_id)
    resuming = tune.Tuner.can_restore(path)
    parent_id = open_parent(
        client, target, attempt, spec.spec_hash(), spec.canonical_json(), sweep_params(spec, trials)
    )
    if startup is not None:  # the driver's process of a Ray job (main), not a sweep run in-process
        ready = process_age_s()
        log_metrics(client, parent_id, dict(startup) | ({"driver_ready_seconds": ready} if ready else {}),
                    step=attempt)  # fmt: skip
    stale = close_stale_children(client, target, resuming)
    logger.info("sweep %s attempt %d: %d trials, %s", job_id, attempt, len(trials),
                f"resuming {path} ({len(stale)} interrupted runs)" if resuming else f"new experiment at {path}")  # fmt: skip
    function = FunctionRun.of(spec.function, main_metric_of(spec)) if spec.function is not None else None
    context = TrialContext(target, parent_id, attempt, axes, path, tuple(confinement_environment().items()),
                           system_metrics_interval=system_metrics_interval(), function=function)  # fmt: skip
    resolver = TrialResolver(axes)
    # Read and tokenised once here, not once per trial (a custom function reads its own data).
    shared = share_data(data_trials(spec, trials)) if function is None else {}
    trainable = tune.with_resources(
        tune.with_parameters(train_trial, context=context, shared_data=shared),
        trial_resources(request, settings.placement),
    )  # GPU trials go best fit (worker.tune.placement)
    space = param_space(spec, trials)
    if resuming:
        for note in ensure_restorable(path):
            logger.warning("resume: %s; the trial picks its newest usable checkpoint", note)
        tuner = tune.Tuner.restore(
            path, trainable=trainable, resume_unfinished=True, resume_errored=True, param_space=space
        )
    else:
        callbacks = [TrialStateCallback(target, parent_id, resolver), LiveTable(resolver, table),
                     AloneAfterOom(alone(spec, per_gpu, node_cpus(nodes, spec.resources.cpus))),
                     StallGuard(target, spec.limits.stall_timeout_s)]  # fmt: skip
        if settings.unplaceable_timeout_s > 0:
            callbacks.append(UnplaceableGuard(settings.unplaceable_timeout_s))
        tuner = tune.Tuner(
            trainable,
            param_space=space,
            tune_config=tune_config(spec, trials),
            run_config=run_config(spec, job_id, settings, callbacks),
        )
    try:
        results = tuner.fit()
        if results.num_terminated + results.num_errors < len(results):
            raise SweepInterrupted(f"interrupted; rerun with job id {job_id!r} to resume from {path}")
    except BaseException as err:
        client.set_tag(parent_id, ERROR_MESSAGE, f"{type(err).__name__}: {err}"[-4000:])
        client.set_terminated(
            parent_id, "KILLED" if isinstance(err, SweepInterrupted | KeyboardInterrupt) else "FAILED"
        )
        close_stale_children(client, target, resuming=True)
        raise
    outcomes = collect_outcomes(results, client, target, parent_id, resolver)
    summary = build_summary(job_id=job_id, tracking_uri=settings.tracking_uri, parent_run_id=parent_id,
                            main_metric=main_metric_of(spec), outcomes=outcomes)  # fmt: skip
    register_job_models(client, team=settings.team, spec=spec, job_id=job_id, experiment_id=target.experiment_id,
                        parent_id=parent_id, summary=summary, outcomes=outcomes)  # fmt: skip
    log_metrics(client, parent_id, summary_metrics(summary), step=attempt)
    client.log_dict(parent_id, summary, "summary.json")
    if not completed_trials(summary):  # the sweep ran but produced nothing: say why on the parent run
        client.set_tag(parent_id, ERROR_MESSAGE, no_result_reason(summary)[:4000])
    else:  # an earlier attempt's failure no longer describes the job
        clear_tags(client, client.get_run(parent_id), [ERROR_MESSAGE])
    client.set_terminated(parent_id, "FINISHED")
    return summary


def sweep_params(spec: JobSpec, trials: list[dict[str, Any]]) -> dict[str, str]:
    """The parent run's params: what the sweep is, at a glance (the whole spec is its spec.json)."""
    return {
        "task": ",".join(spec.tasks),
        "model": spec.model,
        "method": spec.method,
        "preset": str(spec.search_space.preset),
        "axes": ",".join(
            sorted(spec.grid_axes()) + sorted(spec.sampled_axes()) + sorted(spec.function_axes())
        ),
        "seeds": json.dumps(spec.seeds),
        "trials": str(len(trials) * len(spec.function_grid())),
        **({"function": spec.function.entrypoint} if spec.function is not None else {}),
        "search": spec.search.algorithm + ("+asha" if spec.search.asha else ""),
        "resources": json.dumps(spec.resources.model_dump()),
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m worker.tune.sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("--job-id", help="the job id (Tune experiment name, MLflow parent run name)")
    p.add_argument("--attempt", type=int, default=1, help="the job's attempt number (1, 2, ...)")
    p.add_argument("--spec", help="a job spec file (YAML or JSON)")
    p.add_argument("--spec-json", help=f"the job spec as inline JSON (default: ${SPEC_ENV})")
    p.add_argument(
        "--storage-path", help="Tune storage: a folder or s3://... (default: $SMARTUNE_STORAGE_PATH)"
    )
    return p


def main(argv: Sequence[str] | None = None, table: TextIO | None = None) -> int:
    imported = process_age_s()  # this module and its imports loaded: the driver's import cost
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        spec = load_spec(args)
        check_plan(spec)
        job_id = check_job_id(args.job_id or default_job_id(spec))
        preflight(spec)
    except SpecError as err:
        print(str(err), file=sys.stderr)
        return 2
    try:
        settings = Settings.from_env(storage_path=args.storage_path)
    except ValueError as err:  # a malformed SMARTUNE_* setting, named
        print(f"invalid setting: {err}", file=sys.stderr)
        return 2
    owned = False
    try:
        owned = connect_ray()
        startup = {"driver_import_seconds": imported} if imported is not None and argv is None else None
        summary = run_sweep(spec, job_id=job_id, attempt=args.attempt, settings=settings, table=table,
                            startup=startup)  # fmt: skip
    except SpecMismatchError as err:
        print(f"invalid job: {err}", file=sys.stderr)
        return 2
    except (SweepInterrupted, KeyboardInterrupt) as err:
        print(f"sweep {job_id}: {err or 'interrupted'}", file=sys.stderr)
        return 130
    except Exception as err:
        logger.exception("sweep %s could not run", job_id)
        print(f"sweep {job_id} could not run: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    finally:
        if owned:
            ray.shutdown()  # stops trial log forwarding, so the summary stays the last line of stdout
    completed = completed_trials(summary)
    if not completed:  # a sweep that produced no result failed, whatever ran
        print(f"sweep {job_id}: {no_result_reason(summary)}", file=sys.stderr)
    sys.stdout.flush()
    print(json.dumps(summary, default=str))
    return 0 if completed else NO_RESULT


if __name__ == "__main__":
    exit_at_once(main())
