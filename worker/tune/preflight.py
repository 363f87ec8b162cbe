"""The checks a sweep makes before it asks Ray for anything: the spec's model is known and its data is there,
with one train and every eval split per task. Each failure is a SpecError naming the field."""

from __future__ import annotations

from pathlib import Path

from worker.contract.errors import UserFunctionError
from worker.contract.sources import SourceError, classify
from worker.contract.spec import JobSpec
from worker.contract.specfile import SpecError
from worker.contract.tasks import get_task
from worker.contract.trial import TrainConfig
from worker.training.models import describe_model
from worker.training.trial_data import data_files
from worker.tune.tuning import data_trials, trial_configs
from worker.tune.user_function import load_function


def preflight(spec: JobSpec) -> None:
    """Checks that need the file system or the model registry; raises SpecError naming the field. A
    custom-function job: its function must import here (the workers share the driver's code and path)."""
    if spec.function is not None:
        try:
            load_function(spec.function.entrypoint)
        except UserFunctionError as err:
            raise SpecError(f"invalid job spec:\nfunction.entrypoint: {err}") from None
        return
    try:
        describe_model(spec.model)
    except ValueError as err:
        message = str(err) if str(err).startswith("model:") else f"model: {err}"
        raise SpecError(f"invalid job spec:\n{message}") from None
    try:
        source = classify(spec.data, "data") if spec.data is not None else None
    except SourceError as err:
        raise SpecError(f"invalid job spec:\n{err}") from None
    if source is not None and source.kind == "local" and not source.path.exists():
        raise SpecError(f"invalid job spec:\ndata: no such file or folder: {spec.data}")
    one_per_task = {
        t["task"]: t for t in reversed(data_trials(spec, trial_configs(spec, spec.resources.cpus)))
    }
    for trial in one_per_task.values():
        config = TrainConfig.from_dict(trial)
        task = get_task(config.task)
        if config.data and Path(config.data).is_dir():
            needed = 1 + len(task.eval_splits)  # train + every eval split
            if len(data_files(config, task)) < needed:
                raise SpecError(
                    f"invalid job spec:\ndata: {config.data} has no train/{'/'.join(task.eval_splits)} files "
                    f"for task {task.name!r}"
                )
