"""The job spec's cross-field rules: checks that read several blocks of one spec at once.

Each takes a validated `JobSpec` and raises ValueError with a message that starts with the field to change;
`JobSpec._grid_is_valid` calls them in order, so pydantic reports the first as a validation error (a 422).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from worker.contract.grid import expand_grid
from worker.contract.search import Axis
from worker.contract.trial import TYPES

if TYPE_CHECKING:
    from worker.contract.spec import JobSpec


def check_sampled(name: str, axis: Axis, base: dict[str, Any]) -> None:
    """A uniform/loguniform axis samples real numbers within [low, high]: only for a real-valued field, and
    both ends must be values the field accepts (a grid cell is checked the same way, in `trials`)."""
    if axis.type not in ("uniform", "loguniform") or axis.low is None or axis.high is None:
        return
    if name in TYPES and TYPES[name] is not float:
        raise ValueError(
            f"search_space.axes.{name}: a {axis.type} axis samples real numbers; use grid or choice"
        )
    for end in (axis.low, axis.high):
        try:
            expand_grid(base, {name: [end]})
        except ValueError as err:
            raise ValueError(f"search_space.axes.{name}: {err}") from None


def check_function(spec: JobSpec) -> None:
    """A function trial has no model, method or LoRA of the loop's to use; Optuna takes one
    configuration's trial fields only, and a joint multitask run is the loop's own."""
    if spec.function is None:
        return
    if spec.search.algorithm == "optuna":
        raise ValueError("function: search.algorithm optuna is not supported yet; use grid or random")
    if spec.multitask is not None:
        raise ValueError("function: a custom-function job cannot be a multitask job")
    if spec.peft is not None:
        raise ValueError("function: peft configures the built-in loop's model; a function trains its own")


def check_multitask(spec: JobSpec) -> None:
    """A joint run needs at least two distinct tasks; ASHA would stop it by the joint epochs alone, its
    batches run on one worker, it chooses its epochs on dev (no held-out validation split), and it
    trains every weight (no LoRA)."""
    if spec.multitask is None:
        return
    tasks = spec.tasks
    if len(tasks) < 2 or len(set(tasks)) != len(tasks):
        raise ValueError(
            f"multitask: needs a `task` list of at least 2 distinct tasks to train jointly, got {tasks}"
        )
    if spec.search.asha is not None:
        raise ValueError("multitask: search.asha is not supported (it would stop before the fine-tuning)")
    base = spec.base_values()
    if base["workers"] > 1:
        raise ValueError(
            "multitask: training.workers > 1 is not supported; a multitask trial runs on one worker"
        )
    if base["validation_fraction"] > 0:
        raise ValueError(
            "multitask: training.validation_fraction is not supported; a multitask trial selects on dev"
        )
    if spec.peft is not None:
        raise ValueError(
            "multitask: peft is not supported yet; a multitask trial shares one encoder between its "
            "task models, which LoRA's wrapper does not"
        )


def check_workers(spec: JobSpec) -> None:
    """Data-parallel ranks on GPUs take one whole GPU each: as many ranks as GPUs per trial; on CPU,
    at least one of the trial's CPUs each."""
    workers, gpus, cpus = spec.base_values()["workers"], spec.resources.gpus, spec.resources.cpus
    if not gpus and workers > cpus:
        raise ValueError(
            f"training.workers: {workers} CPU ranks need at least {workers} CPUs per trial (resources.cpus "
            f"is {cpus:g})"
        )
    if gpus and workers > 1 and workers != gpus:
        raise ValueError(
            f"training.workers: {workers} ranks of a trial take one GPU each, but resources.gpus is {gpus:g}; "
            f"set resources.gpus to {workers} (or workers to {gpus:g})"
        )


def check_optuna(spec: JobSpec) -> None:
    """Optuna proposes values for the sampled axes of one configuration; Tune's grid cells cannot be
    handed to it (its choices are plain values), so a grid beyond one cell is refused, saying why."""
    if spec.search.algorithm != "optuna":
        return
    if not spec.sampled_axes():
        raise ValueError(
            "search.algorithm: optuna needs at least one choice, uniform or loguniform axis to search"
        )
    cells = len(spec.trials())
    if cells > 1:
        several = [n for n, v in spec.grid_axes().items() if len(v) > 1]
        raise ValueError(
            f"search.algorithm: optuna searches one configuration, but the grid has {cells} cells (axes "
            f"{', '.join(several)}); make them choice axes, or run one job per seed or task"
        )
