"""Sequence classification on decoders (GPT-2, Llama, Qwen2) under SMART: the embedding split is exact,
left and right padding give one sentence the same logits, a SMART step trains each architecture, and a
tokenizer without a pad token pads with its EOS token."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, GPT2Config, GPT2ForSequenceClassification

from smart_core.integrations.decoder import DecoderSplit, decoder_split, model_positions, positions_from_mask
from tests.worker.training.decoder_setup import DECODERS, random_examples, session_for, train_config
from worker.training.batching import collate
from worker.training.loop import train_step
from worker.training.models import _minilm_dir, resolve_model

pytestmark = pytest.mark.usefixtures("no_network")


def test_positions_follow_the_mask_on_either_side() -> None:
    left = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    right = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    assert positions_from_mask(left).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]
    assert positions_from_mask(right)[0, :3].tolist() == [0, 1, 2]


def test_the_model_gets_the_masks_positions_and_no_segment_ids() -> None:
    """The decoder's inputs carry mask-derived positions: GPT-2's are computed in `embed` anyway, but a
    model that reads `position_ids` itself (rotary attention) must see the same ones. Without a mask every
    row counts 0..T-1."""
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    ids = torch.arange(8).view(2, 4)
    split = DecoderSplit(output_module=torch.nn.Identity(), words=torch.nn.Identity())
    kwargs = split.model_kwargs({"input_ids": ids, "attention_mask": mask, "token_type_ids": ids})
    assert kwargs.keys() == {"input_ids", "attention_mask", "position_ids"}
    assert kwargs["position_ids"].tolist() == [[0, 0, 0, 1], [0, 1, 2, 3]]
    assert model_positions({"input_ids": ids[:, :3]}).tolist() == [[0, 1, 2], [0, 1, 2]]


def test_gpt2s_embedding_dropout_is_applied_once_in_training() -> None:
    """GPT-2's x is drop(wte(ids) + wpe(positions)): in train mode `embed` applies the embedding dropout (the
    perturbed tensor replaces `drop`'s output, so the model applies none after it); in eval mode none."""
    config = GPT2Config(vocab_size=100, n_positions=32, n_embd=32, n_layer=1, n_head=2, embd_pdrop=0.5)
    model = GPT2ForSequenceClassification(config)
    split = decoder_split(model)
    assert split is not None and split.dropout is model.transformer.drop
    batch = {
        "input_ids": torch.randint(0, 100, (4, 16)),
        "attention_mask": torch.ones(4, 16, dtype=torch.long),
    }
    model.train()
    dropped = (split.embed(batch) == 0).float().mean()
    model.eval()
    assert 0.4 < dropped < 0.6 and (split.embed(batch) == 0).float().mean() == 0


def test_a_layout_it_does_not_know_is_no_decoder() -> None:
    assert decoder_split(torch.nn.Linear(2, 2)) is None


@pytest.mark.parametrize("name", DECODERS)
def test_the_split_is_the_plain_model_at_zero_noise(name: str) -> None:
    """forward_from_embeddings(embed(batch)) is the model's own forward: nothing embedded twice."""
    session = session_for(train_config(name))
    session.model.eval()
    batch = collate(session.train, list(range(8)), session.pad_id)
    batch.pop("labels")
    with torch.no_grad():
        split = session.adapter.forward(batch)
        plain = session.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    assert session.adapter.decoder is not None
    torch.testing.assert_close(split, plain, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", DECODERS)
def test_left_and_right_padding_give_one_sentence_the_same_logits(name: str) -> None:
    session = session_for(train_config(name))
    session.model.eval()
    data = random_examples(longest=16)
    short = min(range(8), key=lambda i: len(data.input_ids[i]))
    longest = max(range(8), key=lambda i: len(data.input_ids[i]))
    assert len(data.input_ids[short]) < len(data.input_ids[longest])  # the short one is padded
    logits = {}
    with torch.no_grad():
        for side in ("left", "right"):
            batch = collate(data, [short, longest], session.pad_id, side=side)
            assert (batch["attention_mask"][0, 0] == 0) == (side == "left")
            batch.pop("labels")
            logits[side] = session.adapter.forward(batch)
        alone = collate(data, [short], session.pad_id)
        alone.pop("labels")
        unpadded = session.adapter.forward(alone)
    torch.testing.assert_close(logits["left"], logits["right"], rtol=0, atol=1e-5)
    torch.testing.assert_close(logits["left"][:1], unpadded, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", DECODERS)
@pytest.mark.parametrize("side", ["left", "right"])
def test_a_smart_step_trains_every_weight_of_a_decoder(name: str, side: str) -> None:
    session = session_for(train_config(name, padding_side=side))
    assert session.padding_side == side
    assert session.config.method_config().lambda_s > 0 and session.objective.reference is not None
    before = {n: p.detach().clone() for n, p in session.model.named_parameters()}
    parts = train_step(session, list(range(8)))
    assert torch.isfinite(parts["loss"]) and float(parts["skipped_step"]) == 0.0
    assert float(parts["r_s"]) > 0  # the perturbed forward differs from the clean one
    changed = [n for n, p in session.model.named_parameters() if not torch.equal(p, before[n])]
    assert any("score" in n for n in changed) and len(changed) > len(before) // 2


def test_left_padding_is_refused_for_an_encoder() -> None:
    with pytest.raises(ValueError, match="padding_side: left pads an encoder"):
        session_for(train_config("tiny-random", padding_side="left"))


def _gpt2_checkpoint(folder: Path) -> Path:
    """A local GPT-2 checkpoint whose tokenizer, like GPT-2's, has an EOS token and no pad token."""
    tokenizer = AutoTokenizer.from_pretrained(_minilm_dir(), local_files_only=True)
    tokenizer.pad_token = None
    tokenizer.eos_token = "[SEP]"
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=1, n_head=2, n_positions=64,
                        bos_token_id=101, eos_token_id=102)  # fmt: skip
    assert config.pad_token_id is None
    GPT2ForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_gpt2_checkpoint_without_a_pad_token_pads_with_eos(tmp_path: Path) -> None:
    folder = _gpt2_checkpoint(tmp_path / "gpt2")
    model, tokenizer = resolve_model(str(folder), num_labels=2, is_regression=False, head_dropout=0.1, seed=1)
    assert tokenizer.pad_token == "[SEP]" and tokenizer.pad_token_id == 102
    assert model.config.pad_token_id == 102  # the head finds each row's last token by it
    batch = tokenizer(
        ["a short one", "a somewhat longer sentence than that"], padding=True, return_tensors="pt"
    )
    assert (batch["input_ids"] == 102).sum() > 2  # padded with the EOS id
    with torch.no_grad():
        assert model(**batch).logits.shape == (2, 2)
