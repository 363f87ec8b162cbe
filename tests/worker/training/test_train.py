"""End-to-end training: `smartune train` on real files, resume exactness, bad input."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import pytest
import torch

from worker.contract.trial import TrainConfig
from worker.training.finetune import run_training
from worker.training.loop import iterate_epoch
from worker.training.session import TrainingSession

pytestmark = pytest.mark.glue


def _config(glue_dir: Path, **kw: object) -> TrainConfig:
    base = {"task": "rte", "data": str(glue_dir), "model": "tiny-random", "epochs": 2, "batch_size": 8,
                "max_train_samples": 48, "max_eval_samples": 16, "max_seq_length": 64, "learning_rate": 1e-3}  # fmt: skip
    return TrainConfig(**{**base, **kw})  # type: ignore[arg-type]


def test_resume_mid_epoch_is_exact(glue_dir: Path) -> None:
    """Kill after 3 steps of epoch 1, restore from the state dict in a fresh session: identical results."""
    config = _config(glue_dir, method="smart", method_params={"epsilon": 1e-3})
    straight = run_training(config, None)
    first = TrainingSession.build(config)
    steps = iterate_epoch(first)
    for _ in range(3):
        next(steps)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)  # what a checkpoint file holds
    del first, steps
    resumed = TrainingSession.build(config)
    buffer.seek(0)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))  # as a checkpoint is loaded
    assert resumed.position.step_in_epoch == 3
    result = run_training(config, None, session=resumed)
    assert result["best"] == straight["best"]
    assert [e["train_loss"] for e in result["epochs"]] == [e["train_loss"] for e in straight["epochs"]]


def test_regression_task_trains(glue_dir: Path, tmp_path: Path) -> None:
    result = run_training(_config(glue_dir, task="stsb", epochs=1), tmp_path)
    assert set(result["best"]) == {"pearson", "spearman", "combined_score"}
    assert result["main_metric"] == "pearson"


def test_state_dict_is_picklable(glue_dir: Path) -> None:
    session = TrainingSession.build(_config(glue_dir, method="smart-breg-only"))
    assert pickle.loads(pickle.dumps(session.state_dict()))["reference"]["updates_done"] == 0


def test_every_declared_optimizer_is_built() -> None:
    from worker.contract.trial import OPTIMIZERS
    from worker.training.session import OPTIMIZER_CLASSES

    assert set(OPTIMIZER_CLASSES) == set(OPTIMIZERS)
