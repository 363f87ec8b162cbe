"""Models as MLflow users expect them: each trial's best checkpoint in the transformers flavour.

- **The trial's model.** Once a trial has trained to its end, its best epoch's checkpoint (the run's
  `best_checkpoint` artifact folder, logged when that epoch ended) is logged once more as an MLflow model
  of the transformers flavour, named `model`: the weights, the tokenizer and the config, whose
  `id2label`/`label2id` carry the task's label names (`worker.training.models.set_label_names`), for the
  pipeline task `text-classification`. `mlflow.transformers.load_model(uri)` then gives a
  `TextClassificationPipeline` whose answers are label names (`entailment`/`not_entailment` for RTE).
  Regression tasks (STS-B) use the same task, the only one MLflow's flavour has for a sequence head:
  transformers' pipeline applies no function to a `problem_type="regression"` head, so it answers the raw
  predicted similarity as the score of the one label `score`. The model is an MLflow 3 logged model
  (`models:/<model id>`, linked to the run at the best epoch's step, so it carries that epoch's metrics)
  in the run's experiment; the run's `smartune.model_uri` tag names it. It is read back from
  `best_checkpoint` (not taken from the session, which holds the last epoch's weights), so a trial that
  resumed after its best epoch logs the same weights.
- **The registry.** worker.tune.registration adds the best trial's model of each task to the team's
  registered model of that task (`smartune-<team>-<task>`) and moves its alias `best`.

MLflow's flavour reads the process-wide tracking URI in places (the logged model's status), so those calls
run inside `tracking_store`.
"""

from __future__ import annotations

import importlib.metadata
import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Run

from worker.contract.tags import (
    BEST_CHECKPOINT,
    BEST_EPOCH,
    JOB,
    MODEL_ERROR,
    MODEL_URI,
    TRIAL,
)
from worker.tune.tracking import retrying, set_tags, tracking_store

MODEL_NAME = "model"  # the logged model's name: `runs:/<run id>/model` resolves to it too
PIPELINE_TASK = "text-classification"  # classification and regression heads alike (see above)
_PROGRESS_BAR_ENV = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
_REQUIREMENTS = ("transformers", "torch", "tokenizers", "safetensors")  # what loading the model needs


def _requirements() -> list[str]:
    """Pinned pip requirements of the flavour, given explicitly: MLflow's own inference would load the
    model in a subprocess, and its defaults name torchvision, which this worker does not install."""
    out = []
    for package in _REQUIREMENTS:
        try:
            version = importlib.metadata.version(package).split("+")[0]  # torch 2.x+cpu: no local label
        except importlib.metadata.PackageNotFoundError:
            continue
        out.append(f"{package}=={version}")
    return out


@contextmanager
def _no_progress_bar() -> Iterator[None]:
    """No "Downloading artifacts" bar in the job log (MLflow reads the variable at each download)."""
    before = os.environ.get(_PROGRESS_BAR_ENV)
    os.environ[_PROGRESS_BAR_ENV] = "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_PROGRESS_BAR_ENV, None)
        else:
            os.environ[_PROGRESS_BAR_ENV] = before


def _model_card(run: Run, epoch: int, labels: Mapping[int, str]) -> Any:
    from huggingface_hub import ModelCard

    params, tags, metrics = run.data.params, run.data.tags, run.data.metrics
    score = metrics.get("best_score")
    text = (
        f"---\nlibrary_name: transformers\npipeline_tag: {PIPELINE_TASK}\ntags:\n- smartune\n---\n"
        f"# {tags.get(JOB, '?')} / {f'trial {tags[TRIAL]}' if TRIAL in tags else run.info.run_name}\n\n"
        f"Fine-tuned by smartune on `{params.get('task', '?')}` from `{params.get('model', '?')}` with "
        f"method `{params.get('method', '?')}`. This is epoch {epoch}, the best on the dev split"
        + (f" (main metric {score:.4f})" if score is not None else "")
        + f". Labels: {', '.join(labels[i] for i in sorted(labels))}.\n"
    )
    return ModelCard(text)


def log_best_model(client: MlflowClient, run_id: str) -> str:
    """Logs the run's `best_checkpoint` as a transformers-flavour model (see the module's text) and tags the
    run with its URI, which it returns (`models:/<model id>`)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    run = retrying(lambda: client.get_run(run_id))
    epoch = int(run.data.tags.get(BEST_EPOCH, "0"))
    with tempfile.TemporaryDirectory() as tmp:
        with _no_progress_bar():
            checkpoint = retrying(lambda: client.download_artifacts(run_id, BEST_CHECKPOINT, tmp))
        model = AutoModelForSequenceClassification.from_pretrained(checkpoint)
        tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        logged = retrying(
            lambda: client.create_logged_model(
                experiment_id=run.info.experiment_id,  # the run's, not the process's "active" experiment
                name=MODEL_NAME,
                source_run_id=run_id,
                tags={
                    JOB: run.data.tags.get(JOB, ""),
                    TRIAL: run.data.tags.get(TRIAL, ""),
                    BEST_EPOCH: str(epoch),
                },
                params=dict(run.data.params),
            )
        )
        with tracking_store(client.tracking_uri):
            import mlflow.transformers

            mlflow.transformers.log_model(
                transformers_model={"model": model, "tokenizer": tokenizer},
                name=MODEL_NAME,
                task=PIPELINE_TASK,
                model_card=_model_card(run, epoch, model.config.id2label),  # none fetched from the hub
                pip_requirements=_requirements(),
                run_id=run_id,
                model_id=logged.model_id,
                step=epoch,  # links the best epoch's metrics to the model
            )
    uri = f"models:/{logged.model_id}"
    set_tags(client, run_id, {MODEL_URI: uri})
    if MODEL_ERROR in run.data.tags:  # an earlier start could not log it; this one did
        retrying(lambda: client.delete_tag(run_id, MODEL_ERROR))
    return uri
