"""The linearised R_s (smart_core.linearized, issue 28) on MiniLM-L6, the packaged offline model, under bf16
autocast against the model in float64 (the exact finite-difference R_s, no autocast): the contract that
tests/smart_core/test_linearized.py pins on a tiny random BERT, on a pre-trained encoder."""

from __future__ import annotations

import copy

import pytest

import smart_core.objective
import tests.smart_core.test_linearized as lin
from smart_core import method_config
from worker.contract.sources import MINILM_ALIAS
from worker.training.models import resolve_model

TEXTS = ["a dull, lifeless film", "surprisingly good for a sequel", "the plot makes no sense at all"]


def test_minilm_linearized_bf16_step_matches_fp64(monkeypatch: pytest.MonkeyPatch) -> None:
    """At the paper's ε = σ = 1e-5 (ball, `shared` dropout, eval mode): R_s within 10%, its parameter gradient
    at cosine >= 0.98 (measured: 0.4% and 0.9998 on 8 sentences; fp32's exact difference: 3.8% and 0.945)."""
    monkeypatch.setattr(smart_core.objective, "task_loss", lambda out, labels, regression: out.sum() * 0.0)
    model, tokenizer = resolve_model(
        MINILM_ALIAS, num_labels=3, is_regression=False, head_dropout=0.1, seed=0
    )
    encoded = tokenizer(TEXTS, padding=True, return_tensors="pt")
    batch = {k: encoded[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    cfg = method_config("smart-rs-only", rs_dropout="shared", rs_arithmetic="auto")
    fp64 = cfg.with_overrides(rs_arithmetic="fp32")
    expected, expected_grads, _ = lin.objective_r_s(
        copy.deepcopy(model).double(), batch, fp64, autocast=False
    )
    r_s, grads, parts = lin.objective_r_s(model, batch, cfg, autocast=True)
    assert parts["linearized_step"].item() == 1.0 and parts["fp32_step"].item() == 0.0
    assert abs(r_s.item() - expected.item()) <= 0.10 * expected.item(), (r_s.item(), expected.item())
    assert lin.cosine(grads, expected_grads) >= 0.98
