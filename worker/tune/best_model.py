"""A run's best model as MLflow keeps it: a single-task trial's run, or one task's run of a multitask trial.

- **While training**, each epoch that beats the run's best so far replaces the run's `best_checkpoint`
  artifact folder (a Hugging Face folder: weights, config with the task's label names, tokenizer, and
  `best.json` with the epoch and its dev metrics) and tags the run with its URI and the epoch.
- **At the end**, that folder is logged once more as a transformers-flavour MLflow model
  (worker.tune.registry.log_best_model). Failing to do so is recorded on the run (`smartune.model_error`)
  and does not fail the trial, whose result and checkpoint are already logged.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mlflow import MlflowClient

from worker.contract.tags import BEST_CHECKPOINT, BEST_CHECKPOINT_URI, BEST_EPOCH, MODEL_ERROR
from worker.tune.checkpoints import writing
from worker.tune.registry import log_best_model
from worker.tune.tracking import retrying, set_tags

logger = logging.getLogger(__name__)

FolderWriter = Callable[[Path], Path]  # writes the model as a Hugging Face folder into the given one


def log_best_checkpoint(
    client: MlflowClient,
    run_id: str,
    artifact_uri: str,
    epoch: int,
    metrics: Mapping[str, Any],
    write: FolderWriter,
) -> None:
    """The model `write` gives, as the run's `best_checkpoint` (see the module's text). A full or refusing
    disk raises a `StorageError` naming what was being written."""
    with writing(f"the best model (epoch {epoch}) to a local temporary folder"):
        tmp_dir = tempfile.TemporaryDirectory()
    with tmp_dir as tmp:
        with writing(f"the best model (epoch {epoch}) to the local temporary folder {tmp}"):
            write(Path(tmp))  # weights + config + tokenizer, loadable with from_pretrained
            (Path(tmp) / "best.json").write_text(json.dumps({"epoch": epoch, "metrics": dict(metrics)}))
        with writing(f"the best model (epoch {epoch}) to MLflow's artifact store"):
            retrying(lambda: client.log_artifacts(run_id, tmp, BEST_CHECKPOINT))
    uri = f"{artifact_uri.rstrip('/')}/{BEST_CHECKPOINT}"
    set_tags(client, run_id, {BEST_CHECKPOINT_URI: uri, BEST_EPOCH: epoch})


def log_model(client: MlflowClient, run_id: str) -> None:
    """The run's `best_checkpoint` as an MLflow model, or the reason it is not on the run."""
    try:
        log_best_model(client, run_id)
    except Exception as err:
        logger.warning(
            "could not log the best checkpoint of run %s as an MLflow model", run_id, exc_info=True
        )
        set_tags(client, run_id, {MODEL_ERROR: f"{type(err).__name__}: {err}"[:4000]})
