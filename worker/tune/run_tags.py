"""The tags of a trial's MLflow run that say what ran and where: its provenance (environment, code, data
and model digests, what an audit re-runs from) and each (re)start (attempt, resume point, node, resources).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from typing import Any

import ray
from mlflow.entities import Run

from worker.contract.tags import ATTEMPT, PROVENANCE_PREFIX, RESTORE_NOTE, RESUMED_FROM_EPOCH, STARTS, STATE
from worker.contract.trial import TrainConfig
from worker.training.models import describe_model, source_digest
from worker.training.provenance import dataset_provenance, environment, files_digest
from worker.training.session import TrainingSession
from worker.training.trial_data import data_files
from worker.tune.checkpoints import RestorePoint


def config_json(config: TrainConfig) -> str:
    """The trial's whole TrainConfig as JSON (not the resolved method: `method_params` rebuild it)."""
    values = config.to_dict()
    values.pop("resolved_method", None)
    return json.dumps(values, sort_keys=True)


def provenance_tags(session: TrainingSession, config: TrainConfig, initial_digest: str) -> dict[str, Any]:
    env = environment(session.device, config.deterministic)
    files = data_files(config, session.task)
    tags = {f"{PROVENANCE_PREFIX}{k}": v for k, v in env.items()}
    tags |= {
        f"{PROVENANCE_PREFIX}seed": config.seed,
        f"{PROVENANCE_PREFIX}config": config_json(config),  # what an audit re-runs (worker.tune.audit)
        f"{PROVENANCE_PREFIX}workers": session.ranks.world,
        f"{PROVENANCE_PREFIX}data_source": config.data,
        f"{PROVENANCE_PREFIX}data_files": json.dumps([str(p) for p in files]),
        f"{PROVENANCE_PREFIX}data_sha256": files_digest(files) if files else "n/a (hub dataset)",
        **{f"{PROVENANCE_PREFIX}{k}": v for k, v in dataset_provenance(config.data).items()},
        # which rows of the split: SHA-256 of their sorted positions (worker.training.sampling.rows_sha256)
        **{f"{PROVENANCE_PREFIX}{k}": v for k, v in session.rows.items()},
        f"{PROVENANCE_PREFIX}initial_model_sha256": initial_digest,
        f"{PROVENANCE_PREFIX}model_source_sha256": source_digest(config.model),
        f"{PROVENANCE_PREFIX}model_source": json.dumps(describe_model(config.model), default=str),
    }
    if "git_commit" in env:
        tags["mlflow.source.git.commit"] = env["git_commit"]
    return tags


def start_tags(
    run: Run,
    attempt: int,
    restored: RestorePoint,
    resources: Mapping[str, float],
    gpu_ids: list[Any],
) -> dict[str, Any]:
    """Tags of a (re)start: RUNNING, which attempt, how many starts, from which epoch, where it runs,
    and, when the checkpoint Tune named was unusable, what the trial did instead."""
    return {
        STATE: "RUNNING",
        ATTEMPT: attempt,
        STARTS: int(run.data.tags.get(STARTS, "0")) + 1,
        RESUMED_FROM_EPOCH: restored.epochs_done,
        RESTORE_NOTE: restored.note or None,
        "smartune.pid": os.getpid(),
        "smartune.host": socket.gethostname(),
        "smartune.node_id": ray.get_runtime_context().get_node_id(),  # which Ray node (hosts may run several)
        "smartune.resources": json.dumps(resources, sort_keys=True),
        "smartune.gpu_ids": json.dumps([str(i) for i in gpu_ids]),
    }
