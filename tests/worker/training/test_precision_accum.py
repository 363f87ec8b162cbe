"""Precision, gradient accumulation and compilation as the spec sets them (`precision`, `grad_accum_steps`,
`compile`): the same update from micro-batches, fp16 with its loss scaler through a checkpoint, bf16 and fp16
autocast on CPU (torch's CPU autocast runs both), and clear errors where a setting cannot hold."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from worker.contract.trial import TrainConfig
from worker.training.finetune import run_training
from worker.training.loop import iterate_epoch, micro_batches, train_step
from worker.training.session import TrainingSession, resolve_precision

pytestmark = pytest.mark.glue


def _config(glue_dir: Path, **kw: object) -> TrainConfig:
    base = {"task": "rte", "data": str(glue_dir), "model": "tiny-random", "epochs": 1, "batch_size": 8,
            "max_train_samples": 32, "max_eval_samples": 16, "max_seq_length": 64, "learning_rate": 1e-3}  # fmt: skip
    return TrainConfig(**{**base, **kw})  # type: ignore[arg-type]


def test_micro_batches_split_evenly_and_never_empty() -> None:
    assert micro_batches(list(range(8)), 3) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert micro_batches([1, 2], 4) == [[1], [2]]
    assert micro_batches(list(range(6)), 1) == [list(range(6))]


@pytest.mark.parametrize("method", ["vanilla", "smart-breg-only"])
def test_accumulated_micro_batches_make_the_same_update(glue_dir: Path, method: str) -> None:
    """Dropout off (eval mode) and no random perturbation: one batch of 8 and four micro-batches of 2 give
    the same weights after an update, within float tolerance."""
    weights = []
    for accum in (1, 4):
        session = TrainingSession.build(_config(glue_dir, method=method, grad_accum_steps=accum))
        session.model.eval()
        batch = session.epoch_batches(0)[0]
        for _ in range(2):  # two updates: the Bregman teacher has moved by the second
            parts = train_step(session, batch)
        weights.append({k: v.clone() for k, v in session.model.state_dict().items()})
        assert float(parts["skipped_step"]) == 0.0
    for name, value in weights[0].items():
        torch.testing.assert_close(weights[1][name], value, rtol=1e-4, atol=1e-5, msg=name)


def test_grad_accum_may_not_exceed_the_batch() -> None:
    with pytest.raises(ValueError, match="grad_accum_steps"):
        TrainConfig(batch_size=4, grad_accum_steps=8)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_cpu_autocast_trains_smart_in_low_precision(glue_dir: Path, precision: str) -> None:
    config = _config(glue_dir, method="smart", method_params={"epsilon": 1e-3}, precision=precision)
    result = run_training(config, None)
    assert result["provenance"]["precision"] == precision
    assert all(torch.isfinite(torch.tensor(e["train_loss"])) for e in result["epochs"])


def test_fp16_resumes_with_its_loss_scale(glue_dir: Path) -> None:
    config = _config(glue_dir, method="smart", method_params={"epsilon": 1e-3}, precision="fp16", epochs=2)
    straight = run_training(config, None)
    first = TrainingSession.build(config)
    steps = iterate_epoch(first)
    for _ in range(2):
        next(steps)
    assert first.scaler.is_enabled() and first.state_dict()["scaler"]["scale"] > 0
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    resumed = TrainingSession.build(config)
    buffer.seek(0)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))  # the scale is plain data
    assert resumed.scaler.get_scale() == first.scaler.get_scale()
    result = run_training(config, None, session=resumed)
    assert [e["train_loss"] for e in result["epochs"]] == [e["train_loss"] for e in straight["epochs"]]


def test_precision_resolves_per_device() -> None:
    cpu = torch.device("cpu")
    assert resolve_precision("auto", cpu) is None  # fp32 off the GPU
    assert resolve_precision("fp32", cpu) is None
    assert resolve_precision("bf16", cpu) is torch.bfloat16
    assert resolve_precision("fp16", cpu) is torch.float16
    with pytest.raises(ValueError, match="precision"):
        TrainConfig(precision="fp8")  # type: ignore[arg-type]


def test_fp32_is_the_default_path_on_cpu(glue_dir: Path) -> None:
    session = TrainingSession.build(_config(glue_dir))
    assert session.precision == "fp32" and not session.scaler.is_enabled()


@pytest.mark.slow  # inductor compiles the encoder: about 50 s on 2 cores
def test_compile_trains_and_keeps_the_checkpoint_keys(glue_dir: Path) -> None:
    plain = TrainingSession.build(_config(glue_dir))
    config = _config(glue_dir, method="smart", method_params={"epsilon": 1e-3}, compile=True)
    session = TrainingSession.build(config)
    assert session.state_dict()["model"].keys() == plain.state_dict()["model"].keys()  # loads either way
    result = run_training(config, None, session=session)
    assert torch.isfinite(torch.tensor(result["epochs"][0]["train_loss"]))


def test_compile_refuses_a_model_without_an_encoder() -> None:
    from worker.training.session import compile_encoder

    with pytest.raises(ValueError, match="no `encoder`"):
        compile_encoder(torch.nn.Linear(2, 2))
