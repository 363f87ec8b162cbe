"""From a job spec to Ray Tune's pieces: trial configs, search space, scheduler, run and tune configs.

Tune sees each trial's config as `{"train": <TrainConfig dict>, "sampled": {<axis>: <value>}}`: the
deduplicated grid (JobSpec.trials, equivalent cells once) goes in as one `grid_search` over whole
configs; random axes are Tune domains under `sampled`, drawn per trial and merged by `resolve_trial`.
Paths are made absolute here, because a trial runs in its own working directory (and maybe on another
node, where the same absolute path must exist).

Resources (docs/memory_packing.md): a trial with GPUs asks Ray for `{"GPU": fraction, "gpu_memory_mb": mb}`:
mb is the spec's `resources.gpu_memory_mb` (the control plane's estimate, pinned at submission), the
fraction at least mb's share of the smallest GPU the nodes advertise (JobSpec.Resources.packed_gpus), so
Ray's per-GPU fraction accounting packs trials by memory. A trial that runs out of memory is retried (one
of the job's `limits.max_retries`) alone: `AloneAfterOom` turns its request into a whole GPU (a CPU trial:
a whole node's CPUs) before Tune starts it again.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any

from ray import tune
from ray.tune.experiment import Trial
from ray.tune.schedulers import ASHAScheduler, TrialScheduler
from ray.tune.search import Searcher

from worker.contract.errors import classify
from worker.contract.function import FUNCTION_KEY, SAMPLED_KEY, own_values
from worker.contract.grid import ResolvedTrial, resolve
from worker.contract.multitask import PLAN_KEY
from worker.contract.search import Axis
from worker.contract.sources import default_data_source
from worker.contract.spec import JobSpec
from worker.contract.tags import State
from worker.tune.settings import Settings
from worker.tune.trial_error import trial_error

logger = logging.getLogger(__name__)
# The Ray custom resource: MiB of accelerator memory; a node advertises its GPUs' total.
GPU_MEMORY = "gpu_memory_mb"
METRIC, MODE = "score", "max"  # Tune optimises the main metric of the trial's task, reported as "score"
TIME_ATTR = "epoch"  # ASHA's clock; survives restores, unlike training_iteration
# Checkpoints kept per trial, the newest ones. Not ranked by score: the best model lives in MLflow, and a
# resume needs the latest. Two, because Tune drops a superseded checkpoint before the experiment state
# naming its successor reaches storage; with two kept, a driver killed in that window still finds the
# named folder (worker.tune.checkpoints covers the rarer, longer lags).
KEPT_CHECKPOINTS = 2


def trial_configs(spec: JobSpec, cpus_per_trial: float) -> list[dict[str, Any]]:
    """The spec's deduplicated trials, `data: null` resolved and torch threads = the trial's CPUs."""
    data = spec.data if spec.data is not None else default_data_source()
    out = []
    for trial in spec.trials():
        trial["data"] = data
        if trial.get("num_threads") is None:
            trial["num_threads"] = max(1, math.floor(cpus_per_trial))
        out.append(trial)
    return out


def data_trials(spec: JobSpec, trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trial configs whose data the sweep reads: a multitask trial's once per task."""
    plan = spec.multitask_plan()
    if plan is None:
        return trials
    return [{**trial, "task": task} for trial in trials for task in plan.tasks]


def _domain(axis: Axis) -> Any:
    if axis.type == "choice":
        return tune.choice(list(axis.values or []))
    assert axis.low is not None and axis.high is not None  # checked by Axis
    return (tune.uniform if axis.type == "uniform" else tune.loguniform)(axis.low, axis.high)


def param_space(spec: JobSpec, trials: list[dict[str, Any]]) -> dict[str, Any]:
    # Optuna takes no grid: its one configuration (the contract allows no more) is a constant.
    train = trials[0] if spec.search.algorithm == "optuna" else tune.grid_search(trials)
    space: dict[str, Any] = {"train": train}
    plan = spec.multitask_plan()
    if plan is not None:  # every trial trains these tasks jointly (worker.tune.multitask_trial)
        space[PLAN_KEY] = plan.to_dict()
    sampled = spec.sampled_axes()
    if sampled:
        space["sampled"] = {name: _domain(axis) for name, axis in sorted(sampled.items())}
    own = spec.function_grid()
    if own != [{}]:  # a custom function's own grid axes, crossed with the trial configs by Tune
        space[FUNCTION_KEY] = tune.grid_search(own)
    if spec.function_sampled():
        space[SAMPLED_KEY] = {name: _domain(axis) for name, axis in spec.function_sampled().items()}
    return space


def resolve_trial(config: Mapping[str, Any], axes: tuple[str, ...]) -> ResolvedTrial:
    """A Tune trial config ({"train": grid values, "sampled": random values}, and a custom function's own
    values) -> the trial it trains; its cell holds the function's own values too."""
    trial = resolve(config["train"], config.get("sampled"), axes)
    own = own_values(config)
    if not own:
        return trial
    cell = {k: own[k] if k in own else trial.cell.get(k) for k in axes}
    return ResolvedTrial(trial.config, cell)


class TrialResolver:
    """The ResolvedTrial of each Tune trial, made once; the driver's callbacks share one (plain data, so
    Tune can pickle them into its experiment state)."""

    def __init__(self, axes: tuple[str, ...]) -> None:
        self.axes = axes
        self._resolved: dict[str, ResolvedTrial] = {}

    def __call__(self, trial_id: str, config: Mapping[str, Any]) -> ResolvedTrial:
        if trial_id not in self._resolved:
            self._resolved[trial_id] = resolve_trial(config, self.axes)
        return self._resolved[trial_id]


def cell_axes(spec: JobSpec) -> tuple[str, ...]:
    """The axes that tell cells apart: grid axes with more than one value (not the seed), random axes."""
    grid = [name for name, values in spec.grid_axes().items() if name != "seed" and len(values) > 1]
    own = [
        name for name in spec.function_axes() if len({repr(c.get(name)) for c in spec.function_grid()}) > 1
    ]
    return tuple(grid + sorted(spec.sampled_axes()) + own + sorted(spec.function_sampled()))


def trial_state(status: str, epochs_done: int, planned: int) -> State:
    """Tune's status -> the contract's state; a trial that ended before its last epoch was STOPPED
    (ASHA or the time budget)."""
    if status == Trial.ERROR:
        return "ERROR"
    if status in (Trial.PENDING, Trial.PAUSED):
        return "PENDING"
    if status == Trial.RUNNING:
        return "RUNNING"
    return "TERMINATED" if epochs_done >= planned else "STOPPED"


def scheduler(spec: JobSpec, trials: list[dict[str, Any]]) -> TrialScheduler | None:
    if spec.search.asha is None:
        return None
    return ASHAScheduler(
        time_attr=TIME_ATTR,
        max_t=max(int(t["epochs"]) for t in trials),
        grace_period=spec.search.asha.grace_period,
        reduction_factor=spec.search.asha.reduction_factor,
    )


def trial_dir_name(trial_id: str) -> str:
    return f"trial_{trial_id}"  # short: the default embeds the whole config


def trial_name(trial: Trial) -> str:
    return trial_dir_name(trial.trial_id)


def search_algorithm(spec: JobSpec) -> Searcher | None:
    """Optuna's TPE (seeded with the spec's seed) under a ConcurrencyLimiter, for `search.algorithm:
    optuna`; None otherwise (Tune's grid and random variants)."""
    if spec.search.algorithm != "optuna":
        return None
    import optuna
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    sampler = optuna.samplers.TPESampler(seed=spec.seeds[0])
    return ConcurrencyLimiter(OptunaSearch(sampler=sampler), max_concurrent=spec.limits.max_concurrent_trials)


def tune_config(spec: JobSpec, trials: list[dict[str, Any]]) -> tune.TuneConfig:
    # A pure grid is deterministic per cell: repeating it would only run duplicates.
    samples = spec.search.num_samples if spec.sampled_axes() or spec.function_sampled() else 1
    searcher = search_algorithm(spec)  # a ConcurrencyLimiter when set: it caps the concurrency itself
    return tune.TuneConfig(
        metric=METRIC,
        mode=MODE,
        search_alg=searcher,
        scheduler=scheduler(spec, trials),
        num_samples=samples,
        max_concurrent_trials=None if searcher else spec.limits.max_concurrent_trials,
        time_budget_s=spec.limits.time_budget_s,
        # One worker process runs trial after trial: no re-import of torch/transformers per trial. Each
        # trial rebuilds its session and reseeds everything, so results do not depend on reuse.
        reuse_actors=True,
        trial_name_creator=trial_name,
        trial_dirname_creator=trial_name,
    )


def run_config(
    spec: JobSpec, job_id: str, settings: Settings, callbacks: list[tune.Callback]
) -> tune.RunConfig:
    return tune.RunConfig(
        name=job_id,  # so attempt N+1 of the job finds attempt N's experiment under the storage path
        storage_path=settings.storage_path,
        failure_config=tune.FailureConfig(max_failures=spec.limits.max_retries),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=KEPT_CHECKPOINTS),
        callbacks=callbacks,
        verbose=0,  # the live table (worker.tune.progress) reports instead
    )


def gpu_memory_per_gpu(nodes: Iterable[Mapping[str, Any]]) -> float | None:
    """MiB of the smallest GPU among the live nodes (`ray.nodes()` rows) that advertise GPU_MEMORY (their
    GPUs' total / their GPUs); None when none does: trials are then packed by the spec's fraction alone."""
    sizes = [
        float(res[GPU_MEMORY]) / float(res["GPU"])
        for node in nodes
        if node.get("Alive", True) and (res := node.get("Resources", {})).get("GPU") and res.get(GPU_MEMORY)
    ]
    return min(sizes, default=None)


def node_cpus(nodes: Iterable[Mapping[str, Any]], at_least: float) -> float:
    """The CPUs of the smallest live node with at least `at_least`: what `alone` asks a CPU trial for."""
    sizes = [float(n.get("Resources", {}).get("CPU", 0)) for n in nodes if n.get("Alive", True)]
    return min((c for c in sizes if c >= at_least), default=at_least)


def resources(spec: JobSpec, per_gpu_mb: float | None = None) -> dict[str, float]:
    """A trial's request: its CPUs, its GPUs packed by memory on GPUs of `per_gpu_mb` MiB, and the memory
    itself (per GPU it uses; a whole GPU reserves all of its memory) where the cluster advertises it."""
    out = {"cpu": spec.resources.cpus}
    if spec.resources.gpus:
        out["gpu"] = spec.resources.packed_gpus(per_gpu_mb)
        mb = spec.resources.gpu_memory_mb
        if mb and per_gpu_mb:
            out[GPU_MEMORY] = math.floor(per_gpu_mb) * out["gpu"] if out["gpu"] >= 1 else math.ceil(mb)
    return out


def alone(spec: JobSpec, per_gpu_mb: float | None, cpus_of_a_node: float) -> dict[str, float]:
    """The request of a trial retried after running out of memory: whole GPUs (at least one) with all their
    memory, or for a CPU trial (the host's memory ran out) the CPUs of a whole node."""
    if not spec.resources.gpus:
        return {"cpu": max(spec.resources.cpus, cpus_of_a_node)}
    out = {"cpu": spec.resources.cpus, "gpu": float(max(1, math.ceil(spec.resources.gpus)))}
    if spec.resources.gpu_memory_mb and per_gpu_mb:
        out[GPU_MEMORY] = math.floor(per_gpu_mb) * out["gpu"]
    return out


class AloneAfterOom(tune.Callback):
    """A trial that failed with class `oom` and is about to be retried gets the `alone` request, and keeps
    it. Tune calls this after it requeued the trial (PENDING), when its resources may change. Plain data:
    Tune pickles callbacks into its experiment state."""

    def __init__(self, request: Mapping[str, float]) -> None:
        self.request = dict(request)

    def on_trial_recover(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        if classify(*trial_error(trial)) != "oom":
            return
        logger.warning("trial %s ran out of memory: retried alone with %s", trial.trial_id, self.request)
        trial.update_resources(self.request)
