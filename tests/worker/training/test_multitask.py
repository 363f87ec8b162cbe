"""Multi-task SMART on a tiny random BERT: a classification and a regression task, jointly then alone."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from worker.contract.multitask import MultitaskPlan
from worker.contract.trial import TrainConfig
from worker.training.multitask_run import run_multitask
from worker.training.multitask_session import MultiTaskSession

pytestmark = pytest.mark.glue
PLAN = MultitaskPlan(("rte", "stsb"), "proportional", finetune_epochs=1)


def _config(glue_dir: Path) -> TrainConfig:
    return TrainConfig(task="rte", data=str(glue_dir), model="tiny-random", epochs=2, batch_size=8,
                       max_train_samples=16, max_eval_samples=16, max_seq_length=64, learning_rate=1e-3,
                       method="smart", method_params={"epsilon": 1e-3}, num_threads=1)  # fmt: skip


def _saved(state: dict[str, Any]) -> dict[str, Any]:
    """As a checkpoint holds it (written at once: the live optimiser state keeps changing)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)  # type: ignore[no-any-return]


def _trace(result: dict[str, Any]) -> list[Any]:
    return [(u["unit"], u["stage"], {n: (r["train_loss"], r["metrics"]) for n, r in u["records"].items()})
            for u in result["units"]]  # fmt: skip


def test_shared_encoder_one_head_per_task_one_teacher(glue_dir: Path) -> None:
    session = MultiTaskSession.build(_config(glue_dir), PLAN)
    rte, stsb = (session.parts[t].model for t in PLAN.tasks)
    assert rte.base_model is stsb.base_model  # type: ignore[attr-defined]
    assert rte.config.num_labels == 2 and stsb.config.num_labels == 1  # type: ignore[attr-defined]
    objectives = [session.parts[t].objective for t in PLAN.tasks]
    assert [o.regression for o in objectives if o] == [False, True]
    assert all(o is not None and o.reference is session.reference for o in objectives)
    encoder = sum(p.numel() for p in rte.base_model.parameters())  # type: ignore[attr-defined]
    heads = sum(p.numel() for m in (rte, stsb) for n, p in m.named_parameters() if n.startswith("classifier"))
    assert sum(p.numel() for p in session.model.parameters()) == encoder + heads


def test_joint_then_finetune_learns_both_heads_and_resumes_exactly(glue_dir: Path) -> None:
    config = _config(glue_dir)
    states: list[dict[str, Any]] = []
    result = run_multitask(config, PLAN, lambda _unit, state, _writer: states.append(_saved(state())))
    units = result["units"]
    assert [(u["stage"], u["epoch"], sorted(u["records"])) for u in units] == [
        ("joint", 1, ["rte", "stsb"]), ("joint", 2, ["rte", "stsb"]),
        ("finetune", 1, ["rte"]), ("finetune", 1, ["stsb"]),
    ]  # fmt: skip
    for unit in units:
        for record in unit["records"].values():
            assert math.isfinite(record["train_loss"])
            assert record["main_metric"] in record["metrics"]
    # Both heads learn: each task's training loss falls over the joint epochs (stsb's is squared error).
    for task in PLAN.tasks:
        assert units[1]["records"][task]["train_loss"] < units[0]["records"][task]["train_loss"]
    assert units[0]["records"]["rte"]["components"]["r_s"] >= 0  # SMART ran on each task's batches
    assert set(result["tasks"]) == {"rte", "stsb"}
    assert result["tasks"]["stsb"]["metric"] == "pearson" and result["tasks"]["rte"]["metric"] == "accuracy"
    # A retry from the state after the first joint epoch, and from inside the fine-tuning, ends the same.
    for index in (0, 2):
        assert _trace(run_multitask(config, PLAN, state=states[index])) == _trace(result)


def test_each_unit_can_write_each_task_model_as_it_stands(glue_dir: Path, tmp_path: Path) -> None:
    """Joint units write the shared encoder with the task's head; fine-tuning units the fine-tuned copy."""
    from transformers import AutoModelForSequenceClassification

    def write(unit: dict[str, Any], _state: Any, writer: Any) -> None:
        for name in unit["records"]:
            writer(name, tmp_path / f"{unit['unit']}-{name}")

    run_multitask(_config(glue_dir), PLAN, write)
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["1-rte", "1-stsb", "2-rte", "2-stsb", "3-rte", "4-stsb"]  # joint x2, then one each
    loaded = {p.name: AutoModelForSequenceClassification.from_pretrained(p) for p in tmp_path.iterdir()}
    assert loaded["2-rte"].config.num_labels == 2 and loaded["2-stsb"].config.num_labels == 1
    assert loaded["2-rte"].config.id2label == {0: "entailment", 1: "not_entailment"}

    def encoder(name: str) -> torch.Tensor:
        return loaded[name].base_model.embeddings.word_embeddings.weight

    assert torch.equal(encoder("2-rte"), encoder("2-stsb"))  # one shared encoder in the joint stage
    assert not torch.equal(encoder("1-rte"), encoder("2-rte"))  # as it stood after each joint epoch
    assert not torch.equal(encoder("3-rte"), encoder("2-rte"))  # the fine-tuned copy moved on alone
    assert not torch.equal(encoder("4-stsb"), encoder("2-stsb"))  # each task fine-tunes its own copy
    assert not torch.equal(encoder("4-stsb"), encoder("3-rte"))
