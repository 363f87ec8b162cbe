"""Tests for worker.training.adapter: the embedding-output split used by SMART (no double embedding)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn
from transformers import (
    DebertaV2Config,
    DebertaV2ForSequenceClassification,
    ElectraConfig,
    ElectraForSequenceClassification,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    RobertaConfig,
    RobertaForSequenceClassification,
)

from worker.contract.sources import MINILM_ALIAS, TINY_RANDOM_ALIAS
from worker.training.adapter import EmbeddingAdapter
from worker.training.models import resolve_model

FIRST = ["the cat sat on the mat", "a short one", "is this sentence entailed by the other one at all?"]
SECOND = ["a dog lay on the rug", "it is short", "no"]


pytestmark = pytest.mark.usefixtures("no_network")


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerBase:
    return resolve_model(TINY_RANDOM_ALIAS, num_labels=2, is_regression=False, head_dropout=0.1, seed=0)[1]


@pytest.fixture(scope="module")
def batch(tokenizer: PreTrainedTokenizerBase) -> dict[str, Tensor]:
    enc = tokenizer(FIRST, SECOND, padding=True, return_tensors="pt")
    assert (enc["attention_mask"] == 0).any() and (enc["token_type_ids"] == 1).any()  # padding + pairs
    return dict(enc)


# Tiny models of four architectures, built locally (vocabulary = the MiniLM tokenizer's 30522 ids).
_DIMS = {"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}
_DIMS |= {"intermediate_size": 64, "type_vocab_size": 2, "num_labels": 3}


def _bert() -> PreTrainedModel:
    return resolve_model(TINY_RANDOM_ALIAS, num_labels=3, is_regression=False, head_dropout=0.1, seed=0)[0]


def _roberta() -> PreTrainedModel:
    # pad_token_id 0 matches the MiniLM tokenizer, so RoBERTa's padding-aware position ids are right.
    return RobertaForSequenceClassification(
        RobertaConfig(**_DIMS, max_position_embeddings=514, pad_token_id=0)
    )


def _deberta() -> PreTrainedModel:
    cfg = DebertaV2Config(
        **_DIMS,
        max_position_embeddings=512,
        pad_token_id=0,
        relative_attention=True,
        pos_att_type=["p2c", "c2p"],
    )
    return DebertaV2ForSequenceClassification(cfg)


def _electra() -> PreTrainedModel:
    # embedding_size != hidden_size: the embedding output goes through `embeddings_project` afterwards.
    return ElectraForSequenceClassification(
        ElectraConfig(**_DIMS, embedding_size=16, max_position_embeddings=512)
    )


ARCHITECTURES: dict[str, Callable[[], PreTrainedModel]] = {
    "bert": _bert,
    "roberta": _roberta,
    "deberta-v2": _deberta,
    "electra": _electra,
}


def _eval_adapter(factory: Callable[[], PreTrainedModel], is_regression: bool = False) -> EmbeddingAdapter:
    torch.manual_seed(0)
    return EmbeddingAdapter(factory().eval(), is_regression=is_regression)


@pytest.fixture(scope="module")
def minilm_adapter() -> EmbeddingAdapter:
    model, _ = resolve_model(MINILM_ALIAS, num_labels=3, is_regression=False, head_dropout=0.1, seed=0)
    return EmbeddingAdapter(model.eval(), is_regression=False)


# -- (a) exact equality with the plain model, (e)/(g) across models ---------------------------------------


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_split_forward_equals_plain_model_exactly(arch: str, batch: dict[str, Tensor]) -> None:
    adapter = _eval_adapter(ARCHITECTURES[arch])
    with torch.no_grad():
        plain = adapter.model(**batch).logits
        split = adapter.forward_from_embeddings(batch, adapter.embed(batch))
    assert split.shape == (3, 3)
    assert torch.equal(split, plain)
    assert torch.equal(adapter.forward(batch), plain.detach())


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_the_word_embeddings_site_splits_at_the_word_table(arch: str, batch: dict[str, Tensor]) -> None:
    """At `word-embeddings` (R3F, FreeLB, PGD) the tensor to perturb is the word table's output, and the rest
    of the embedding layer (positions, segments, LayerNorm) runs on it: the plain model's logits again."""
    torch.manual_seed(0)
    model = ARCHITECTURES[arch]().eval()
    adapter = EmbeddingAdapter(model, is_regression=False, site="word-embeddings")
    with torch.no_grad():
        words = adapter.embed(batch)
        split = adapter.forward_from_embeddings(batch, words)
        plain = model(**batch).logits
        table = model.get_input_embeddings()(batch["input_ids"])
        output = EmbeddingAdapter(model, is_regression=False).embed(batch)
    assert torch.equal(words, table)
    assert not torch.allclose(words, output[..., : words.shape[-1]])  # not the embedding layer's output
    assert torch.equal(split, plain)


def test_deberta_embeds_padded_positions_as_zeros(batch: dict[str, Tensor]) -> None:
    """DeBERTa's embedding layer zeroes padded positions with the attention mask, as its own forward does;
    the tensor SMART perturbs must be that one (the logits alone do not show it: pads are masked keys)."""
    adapter = _eval_adapter(_deberta)
    with torch.no_grad():
        x = adapter.embed(batch)
    pad = batch["attention_mask"] == 0
    assert pad.any() and torch.all(x[pad] == 0) and torch.all(x[~pad].abs().sum(-1) > 0)


def test_minilm_split_forward_equals_plain_model(
    minilm_adapter: EmbeddingAdapter, batch: dict[str, Tensor]
) -> None:
    with torch.no_grad():
        plain = minilm_adapter.model(**batch).logits
        x = minilm_adapter.embed(batch)
        split = minilm_adapter.forward_from_embeddings(batch, x)
        # The mt-dnn bug (#230): feeding the embedding OUTPUT back as inputs_embeds embeds twice.
        double = minilm_adapter.model(
            inputs_embeds=x, attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"]
        ).logits
    assert x.shape == (3, batch["input_ids"].shape[1], 384)
    assert torch.equal(split, plain)
    assert not torch.allclose(double, plain, atol=1e-4)  # so the equality above is a real check


def test_replacement_enters_encoder_as_is(batch: dict[str, Tensor]) -> None:
    """The encoder receives the given tensor itself: no second position/type embedding or LayerNorm."""
    adapter = _eval_adapter(_bert)
    seen: list[Tensor] = []
    handle = adapter.model.bert.encoder.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
    try:
        x = adapter.embed(batch).detach() + 0.5  # far from LayerNorm-ed: a second LayerNorm would show
        adapter.forward_from_embeddings(batch, x)
    finally:
        handle.remove()
    assert len(seen) == 1 and seen[0] is x


# -- (b) gradients -------------------------------------------------------------------------------------


def test_gradient_reaches_embeddings_tensor_and_embedding_parameters(batch: dict[str, Tensor]) -> None:
    adapter = _eval_adapter(_bert)
    emb = adapter.model.bert.embeddings
    x = adapter.embed(batch)
    assert x.requires_grad
    delta = torch.zeros_like(x, requires_grad=True)  # the SMART perturbation
    logits = adapter.forward_from_embeddings(batch, x + delta)
    logits.logsumexp(-1).sum().backward()
    assert delta.grad is not None and delta.grad.abs().sum() > 0
    for param in (emb.word_embeddings.weight, emb.position_embeddings.weight, emb.LayerNorm.weight):
        assert param.grad is not None and param.grad.abs().sum() > 0
    encoder_param = adapter.model.bert.encoder.layer[0].attention.self.query.weight
    assert encoder_param.grad is not None and encoder_param.grad.abs().sum() > 0
    assert all(p.grad is not None for p in adapter.head_parameters())


def test_gradient_wrt_detached_input_only(batch: dict[str, Tensor]) -> None:
    adapter = _eval_adapter(_roberta)
    x = adapter.embed(batch).detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(adapter.forward_from_embeddings(batch, x).sum(), x)
    assert grad.shape == x.shape and grad.abs().sum() > 0


# -- (c) perturbations, padding ---------------------------------------------------------------------------


def test_perturbation_changes_logits_and_zero_perturbation_does_not(
    minilm_adapter: EmbeddingAdapter, batch: dict[str, Tensor]
) -> None:
    with torch.no_grad():
        x = minilm_adapter.embed(batch)
        clean = minilm_adapter.forward_from_embeddings(batch, x)
        zero = minilm_adapter.forward_from_embeddings(batch, x + torch.zeros_like(x))
        noisy = minilm_adapter.forward_from_embeddings(batch, x + 1e-2 * torch.randn_like(x))
    assert torch.equal(zero, clean)
    assert not torch.allclose(noisy, clean, atol=1e-6)


def test_padded_positions_are_masked(batch: dict[str, Tensor]) -> None:
    adapter = _eval_adapter(_bert)
    pad = (batch["attention_mask"] == 0).unsqueeze(-1)  # (B, T, 1)
    with torch.no_grad():
        x = adapter.embed(batch)
        clean = adapter.forward_from_embeddings(batch, x)
        moved_pads = adapter.forward_from_embeddings(batch, x + 10.0 * pad)
    torch.testing.assert_close(moved_pads, clean, rtol=0, atol=1e-6)


# -- (d) regression --------------------------------------------------------------------------------------


def test_regression_logits_are_one_dimensional(batch: dict[str, Tensor]) -> None:
    model, _ = resolve_model(TINY_RANDOM_ALIAS, num_labels=1, is_regression=True, head_dropout=0.1, seed=0)
    adapter = EmbeddingAdapter(model.eval(), is_regression=True)
    with torch.no_grad():
        out = adapter.forward(batch)
        plain = model(**batch).logits
    assert out.shape == (3,) and plain.shape == (3, 1)
    assert torch.equal(out, plain[:, 0])


def test_task_mismatch_is_rejected() -> None:
    with pytest.raises(ValueError, match="num_labels=1"):
        EmbeddingAdapter(_bert(), is_regression=True)
    regression, _ = resolve_model(
        TINY_RANDOM_ALIAS, num_labels=1, is_regression=True, head_dropout=0.1, seed=0
    )
    with pytest.raises(ValueError, match="num_labels >= 2"):
        EmbeddingAdapter(regression, is_regression=False)


# -- (f) hook lifecycle ----------------------------------------------------------------------------------


def test_hook_is_removed_after_each_call(batch: dict[str, Tensor]) -> None:
    adapter = _eval_adapter(_bert)
    emb = adapter.model.bert.embeddings
    with torch.no_grad():
        before = adapter.model(**batch).logits
        adapter.forward_from_embeddings(batch, torch.zeros_like(adapter.embed(batch)))
        assert not emb._forward_hooks and not emb._forward_hooks_with_kwargs
        assert torch.equal(adapter.model(**batch).logits, before)
        # Also after a failing call (wrong replacement shape).
        with pytest.raises(ValueError, match="do not match"):
            adapter.forward_from_embeddings(batch, torch.zeros(1, 2, 32))
        assert not emb._forward_hooks
        assert torch.equal(adapter.model(**batch).logits, before)


def test_train_mode_applies_embedding_dropout_once(batch: dict[str, Tensor]) -> None:
    adapter = _eval_adapter(_bert)
    adapter.model.train()
    x = adapter.embed(batch)
    seen: list[Tensor] = []
    handle = adapter.model.bert.encoder.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
    try:
        adapter.forward_from_embeddings(batch, x)
    finally:
        handle.remove()
    assert seen[0] is x  # no second dropout/LayerNorm on top of the embed() output


# -- head parameters and unsupported models --------------------------------------------------------------


@pytest.mark.parametrize(
    ("arch", "head_names"),
    [
        ("bert", {"classifier.weight", "classifier.bias"}),
        ("roberta", {"classifier.dense.weight", "classifier.dense.bias"}),
        ("deberta-v2", {"pooler.dense.weight", "classifier.weight"}),
    ],
)
def test_head_parameters(arch: str, head_names: set[str]) -> None:
    adapter = _eval_adapter(ARCHITECTURES[arch])
    names = {n for n, p in adapter.model.named_parameters() if any(p is h for h in adapter.head_parameters())}
    assert head_names <= names
    assert not any(n.startswith(adapter.model.base_model_prefix + ".") for n in names)


def test_the_word_embeddings_site_needs_input_embeddings(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _bert()
    monkeypatch.setattr(model, "get_input_embeddings", lambda: None)
    with pytest.raises(TypeError, match="no input embeddings"):
        EmbeddingAdapter(model, is_regression=False, site="word-embeddings")
    EmbeddingAdapter(model, is_regression=False)  # the embedding layer's output needs no word table


@pytest.mark.parametrize("output", [torch.zeros(2, 3), "not a tensor"])
def test_an_embedding_output_that_is_not_b_t_h_is_refused(output: object) -> None:
    with pytest.raises(TypeError, match=r"expected a \(B, T, H\) tensor"):
        EmbeddingAdapter._checked(output)


def test_model_without_embeddings_module_is_rejected() -> None:
    class NoEmbeddings(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.base_model = nn.Linear(2, 2)

    with pytest.raises(TypeError, match="base_model.embeddings"):
        EmbeddingAdapter(NoEmbeddings(), is_regression=False)  # type: ignore[arg-type]
