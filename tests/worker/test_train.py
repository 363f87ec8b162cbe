"""End-to-end training: `smartune train` on real files, resume exactness, bad input."""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

import pytest
import torch

from cli.main import main
from worker.config import TrainConfig
from worker.finetune import run_training
from worker.loop import iterate_epoch
from worker.session import TrainingSession

pytestmark = pytest.mark.glue


def test_smartune_train_end_to_end_on_real_rte(glue_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = main(
        [
            "train", "--task", "rte", "--data", str(glue_dir), "--model", "minilm-l6", "--method", "smart",
            "--epochs", "1", "--max-train-samples", "64", "--max-eval-samples", "32", "--max-seq-length", "64",
            "--batch-size", "16", "--lambda-s", "3", "--output", str(out), "--no-progress",
        ]
    )  # fmt: skip
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["main_metric"] == "accuracy"
    assert 0.0 <= metrics["best"]["accuracy"] <= 1.0
    assert [e["epoch"] for e in metrics["epochs"]] == [1]
    for key in ("r_s", "d_breg", "delta_linf", "delta_l2", "grad_ratio_rs", "task_loss"):
        assert key in metrics["epochs"][0]["components"], key
    assert metrics["epochs"][0]["components"]["delta_linf"] <= 1e-5 * 1.0001  # the paper's ball
    assert metrics["examples_per_s"] > 0 and metrics["train_examples"] == 64
    assert metrics["config"]["resolved_method"]["lambda_s"] == 3.0
    assert (
        metrics["provenance"]["torch_threads"] >= 1
        and len(metrics["provenance"]["initial_model_sha256"]) == 64
    )
    assert (out / "best" / "model.safetensors").is_file() and (out / "best" / "tokenizer.json").is_file()


def _config(glue_dir: Path, **kw: object) -> TrainConfig:
    base = {"task": "rte", "data": str(glue_dir), "model": "tiny-random", "epochs": 2, "batch_size": 8,
                "max_train_samples": 48, "max_eval_samples": 16, "max_seq_length": 64, "learning_rate": 1e-3}  # fmt: skip
    return TrainConfig(**{**base, **kw})  # type: ignore[arg-type]


def test_resume_mid_epoch_is_exact(glue_dir: Path) -> None:
    """Kill after 3 steps of epoch 1, restore from the state dict in a fresh session: identical results."""
    config = _config(glue_dir, method="smart", method_overrides={"epsilon": 1e-3})
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
    resumed.load_state_dict(torch.load(buffer, weights_only=False))
    assert resumed.position.step_in_epoch == 3
    result = run_training(config, None, session=resumed)
    assert result["best"] == straight["best"]
    assert [e["train_loss"] for e in result["epochs"]] == [e["train_loss"] for e in straight["epochs"]]


def test_regression_task_trains(glue_dir: Path, tmp_path: Path) -> None:
    result = run_training(_config(glue_dir, task="stsb", epochs=1), tmp_path)
    assert set(result["best"]) == {"pearson", "spearman", "combined_score"}
    assert result["main_metric"] == "pearson"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--task", "nope"], "nope"),
        (["--task", "rte", "--epochs", "0"], "epochs"),
        (["--task", "rte", "--bregman", "vanilla"], "no-op"),
        # An override that would turn R3F into SMART, or vanilla into a regularised method, is refused.
        (["--task", "rte", "--method", "r3f", "--ascent-steps", "1"], "ascent_steps must be 0"),
        (["--task", "rte", "--method", "vanilla", "--lambda-s", "1"], "no SMART regulariser"),
        (["--task", "rte", "--epsilon", "1e-6"], "below what fp32 resolves"),
    ],
)
def test_bad_input_is_one_clear_line(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["train", *argv, "--model", "tiny-random", "--output", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_state_dict_is_picklable(glue_dir: Path) -> None:
    session = TrainingSession.build(_config(glue_dir, method="smart-breg-only"))
    assert pickle.loads(pickle.dumps(session.state_dict()))["reference"]["updates_done"] == 0
