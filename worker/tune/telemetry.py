"""What a trial run records beside its params and metrics: the data it trained on, and the load of its node.

- **The training data** as an MLflow dataset input (context `training`) named `<task>-<split>`
  (`rte-train`). Its digest identifies the examples the trial trained on: the task, the split and every
  example's texts and label after `max_train_samples`, `train_fraction` and the held-out
  `validation_fraction` (the training session's own selection, `train_examples`), so two runs with the
  same digest trained on the same rows, and a changed file, cap, sampling or fraction changes it. MLflow keeps at most 36 characters of a digest: it is the first 32
  hex digits of that SHA-256 (the whole one is the input's tag `smartune.sha256`). Its source is the
  split's file (or the hub dataset); its schema the text columns and `label` (label names for
  classification); its profile counts the rows. A restarted trial finds the input on its run and does not
  read the data again.
- **System metrics**: MLflow's monitor (`system/cpu_utilization_percentage`,
  `system/system_memory_usage_megabytes` and `_percentage`, disk and network, and per NVIDIA GPU
  `system/gpu_<i>_utilization_percentage`, `_memory_usage_megabytes`, `_memory_usage_percentage` and power
  where nvidia-ml-py finds one) on the trial's run while it trains: one point every
  `SMARTUNE_SYSTEM_METRICS_INTERVAL` seconds (the driver's environment; default 15, 0 turns them off;
  MLflow's own `MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL` overrides it) and a last one when the trial
  ends, so even a short trial has one. They describe the node (psutil, NVML), not the trial alone: trials
  sharing a node see the same values, all of its GPUs included.

Neither may fail a trial: a problem is logged as a warning and training goes on.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from mlflow import MlflowClient

from worker.contract.sources import classify, glue_dir
from worker.contract.tasks import LABEL_COLUMN, TaskSpec
from worker.contract.trial import TrainConfig
from worker.training.data import Example
from worker.training.prepared import train_examples
from worker.training.trial_data import data_files
from worker.tune.tracking import CREATED_MEANWHILE, LOCKED, retrying

logger = logging.getLogger(__name__)

INTERVAL_ENV = "SMARTUNE_SYSTEM_METRICS_INTERVAL"
DEFAULT_INTERVAL = 15.0  # seconds between two system-metric points of a trial run
DIGEST_LENGTH = 32  # MLflow stores at most 36 characters of a dataset digest
SHA256_TAG = "smartune.sha256"


# --- the training data ------------------------------------------------------------------------------


def examples_sha256(task: TaskSpec, split: str, examples: Sequence[Example]) -> str:
    """SHA-256 over the task, the split and each example's texts and label, in order."""
    digest = hashlib.sha256(json.dumps({"task": task.name, "split": split}).encode())
    for example in examples:
        digest.update(json.dumps([list(example.texts), example.label], ensure_ascii=False).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def dataset_name(task: TaskSpec, split: str) -> str:
    return f"{task.name}-{split}"


def _source(config: TrainConfig, task: TaskSpec, split: str) -> Any:
    """Where the split came from: its local file (else the folder or file named), or the hub dataset."""
    from mlflow.data.huggingface_dataset_source import HuggingFaceDatasetSource
    from mlflow.data.sources import LocalArtifactDatasetSource  # type: ignore[attr-defined]  # made at import

    named = config.data or (str(glue_dir()) if glue_dir() is not None else None)
    source = classify(named, "data") if named is not None else None
    if source is None or source.kind == "hub":
        path = source.value if source is not None else task.hub_id or task.name
        hub_config = task.hub_config if path == task.hub_id else None
        return HuggingFaceDatasetSource(path=path, config_name=hub_config, split=task.hub_split(split))
    local = config if source.kind == "dataset" else dataclasses.replace(config, data=str(source.path))
    files = data_files(local, task)  # an uploaded dataset: its verified local copy
    return LocalArtifactDatasetSource(str(files[0] if files else local.data))  # train's file comes first


def training_dataset(config: TrainConfig, task: TaskSpec, examples: Sequence[Example]) -> tuple[Any, str]:
    """The MLflow dataset of the training examples, and their full SHA-256."""
    import pandas as pd
    from mlflow.data.pandas_dataset import from_pandas

    split = task.train_split
    columns = {name: [e.texts[i] for e in examples] for i, name in enumerate(task.text_columns)}
    labels: list[Any] = [e.label for e in examples]  # class names when the task has them
    if task.labels is not None:
        labels = [task.labels[int(label)] for label in labels]
    frame = pd.DataFrame({**columns, LABEL_COLUMN: labels})
    sha256 = examples_sha256(task, split, examples)
    dataset = from_pandas(
        frame,
        source=_source(config, task, split),
        targets=LABEL_COLUMN,
        name=dataset_name(task, split),
        digest=sha256[:DIGEST_LENGTH],
    )
    return dataset, sha256


def log_training_data(
    client: MlflowClient,
    run_id: str,
    config: TrainConfig,
    task: TaskSpec,
    examples: Sequence[Example] | None = None,
) -> None:
    """The training examples (`examples`, else read again) as the run's dataset input (context
    `training`), unless it has it already."""
    from mlflow.entities import Dataset, DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    name = dataset_name(task, task.train_split)
    try:
        inputs = retrying(lambda: client.get_run(run_id)).inputs
        if inputs is not None and any(d.dataset.name == name for d in inputs.dataset_inputs or []):
            return  # a restart: the same config read the same data
        examples = train_examples(config, task) if examples is None else examples
        dataset, sha256 = training_dataset(config, task, examples)
        entity = Dataset(**dataset.to_dict())
        tags = [InputTag(MLFLOW_DATASET_CONTEXT, "training"), InputTag(SHA256_TAG, sha256)]
        # Two trials of a job log the same dataset at once: MLflow's get-or-create of its row races (seen on
        # SQLite as "UNIQUE constraint failed: datasets..."); the retry finds the row the other one made.
        retrying(
            lambda: client.log_inputs(run_id, datasets=[DatasetInput(entity, tags)]),
            transient=(*LOCKED, *CREATED_MEANWHILE),
        )
    except Exception:
        logger.warning("could not log the training data of run %s as a dataset input", run_id, exc_info=True)


# --- system metrics ---------------------------------------------------------------------------------


def system_metrics_interval(environ: Mapping[str, str] = os.environ) -> float:
    """Seconds between two system-metric points (`SMARTUNE_SYSTEM_METRICS_INTERVAL`); 0 turns them off."""
    raw = environ.get(INTERVAL_ENV, "").strip()
    if not raw:
        return DEFAULT_INTERVAL
    try:
        return max(float(raw), 0.0)
    except ValueError:
        logger.warning("%s=%r is not a number of seconds; using %g", INTERVAL_ENV, raw, DEFAULT_INTERVAL)
        return DEFAULT_INTERVAL


def _last_sample(monitor: Any) -> None:
    """After the monitor's thread stopped: one more sample, published and flushed, so a trial shorter than
    the interval has a point too, and the samples of an interval the stop cut short are not lost."""
    monitor.collect_metrics()
    monitor.publish_metrics(monitor.aggregate_metrics())
    retrying(monitor.mlflow_logger.flush)


@contextmanager
def system_metrics(run_id: str, tracking_uri: str, interval: float) -> Iterator[None]:
    """MLflow's system metrics on the run while the block runs (see the module's text)."""
    monitor = None
    if interval > 0:
        try:
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

            logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)  # no start/stop lines
            monitor = SystemMetricsMonitor(
                run_id,
                sampling_interval=interval,
                samples_before_logging=1,
                resume_logging=True,  # a restarted trial continues the steps of its run
                tracking_uri=tracking_uri,
            )
            monitor.start()
        except Exception:  # psutil missing, ...
            logger.warning("no system metrics for run %s", run_id, exc_info=True)
            monitor = None
    try:
        yield
    finally:
        if monitor is not None:
            try:
                monitor.finish()
                _last_sample(monitor)
            except Exception:
                logger.warning("could not log the last system metrics of run %s", run_id, exc_info=True)
