"""examples/lora_decoder.yaml, run: each of its trials trains in-process (what a sweep's trial runs, without
Ray or MLflow) and keeps a merged best model with its adapter beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.contract.specfile import spec_from_file
from worker.contract.trial import TrainConfig
from worker.training.finetune import run_training
from worker.training.lora import ADAPTER_DIR

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "lora_decoder.yaml"

pytestmark = [pytest.mark.glue, pytest.mark.usefixtures("no_network")]


def test_the_lora_decoder_example_trains_each_trial(glue_dir: Path, tmp_path: Path) -> None:
    spec = spec_from_file(EXAMPLE)
    assert spec.peft is not None and spec.model == "tiny-random-llama"
    trials = spec.trials()
    assert sorted(t["method"] for t in trials) == ["smart", "vanilla"]
    for trial in trials:
        config = TrainConfig.from_dict({**trial, "data": str(glue_dir), "device": "cpu"})
        result = run_training(config, tmp_path / trial["method"])
        assert result["config"]["peft"]["r"] == 4 and result["config"]["padding_side"] == "left"
        assert 0.0 <= result["best"]["accuracy"] <= 1.0 and result["epochs"][0]["train_loss"] > 0
        best = Path(result["checkpoint"])
        assert (best / "model.safetensors").is_file() and (
            best / ADAPTER_DIR / "adapter_config.json"
        ).is_file()
        if trial["method"] == "smart":
            assert result["epochs"][0]["components"]["r_s"] > 0  # SMART's smoothness term ran
