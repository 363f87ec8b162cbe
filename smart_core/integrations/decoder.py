"""Where a decoder's embedding layer ends: the split `EmbeddingAdapter` makes in GPT-2-, Llama- and
Qwen-style models (sequence classification through `AutoModelForSequenceClassification`).

A decoder has no `embeddings` module: its embedding-layer output (SMART's x_i) is computed inline.
- GPT-2 family (`wte`, `wpe`, `drop` on the base model): x = drop(wte(ids) + wpe(positions)); the module
  whose output is exactly that tensor is `drop`, so the perturbed tensor replaces `drop`'s output and
  enters the first block as-is (no second position embedding, no second dropout).
- Llama family (Llama, Qwen2, Mistral: `embed_tokens` on the base model, rotary positions applied inside
  attention): x = embed_tokens(ids); the word embeddings are the whole embedding layer, so both perturbation
  sites hook `embed_tokens`.

Positions follow the attention mask, `cumsum(mask) - 1` (what generation does), so a left-padded sentence
sits at positions 0..n-1 as it does right-padded: GPT-2's learned positions then match, and the logits of
one sentence do not depend on the padding side. The classification head reads the last token that is not
the pad token (transformers' `GenericForSequenceClassification`: the rightmost non-pad token, either side),
which needs `config.pad_token_id` (worker.training.models sets it; GPT-2 has none: the EOS token serves).
Segment ids are not passed: a decoder has no segments (GPT-2 would embed them with its word table).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn


def positions_from_mask(attention_mask: Tensor) -> Tensor:
    """(B, T) long position ids counting real tokens only: 0..n-1 over each row's tokens wherever the
    padding sits; a padded slot takes its neighbour's position (it is masked as a key, and never read)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


@dataclass(frozen=True)
class DecoderSplit:
    """The embedding layer of one decoder: the module whose output is x (`output_module`), the word
    embeddings, and, for GPT-2, the learned positions and the embedding dropout."""

    output_module: nn.Module
    words: nn.Module
    positions: nn.Module | None = None  # GPT-2's `wpe`; None: rotary positions, inside attention
    dropout: nn.Module | None = None  # GPT-2's `drop` (it is also `output_module`)

    def embed(self, batch: Mapping[str, Tensor]) -> Tensor:
        """x (B, T, H) as the base model computes it, in the modules' current train/eval mode."""
        hidden: Tensor = self.words(batch["input_ids"])
        if self.positions is not None:
            hidden = hidden + self.positions(model_positions(batch)).to(hidden.device)
        if self.dropout is not None:
            hidden = self.dropout(hidden)
        return hidden

    def model_kwargs(self, batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """The model inputs of a decoder: ids, mask and mask-derived positions (no segment ids)."""
        kwargs = {"input_ids": batch["input_ids"]}
        if "attention_mask" in batch:
            kwargs["attention_mask"] = batch["attention_mask"]
        kwargs["position_ids"] = model_positions(batch)
        return kwargs


def model_positions(batch: Mapping[str, Tensor]) -> Tensor:
    """The batch's position ids (B, T): from its attention mask, else 0..T-1 in every row."""
    mask = batch.get("attention_mask")
    if mask is not None:
        return positions_from_mask(mask)
    ids = batch["input_ids"]
    return torch.arange(ids.shape[1], device=ids.device).expand_as(ids)


def decoder_split(model: nn.Module) -> DecoderSplit | None:
    """The split of a decoder's embedding layer, or None when `model` is not one this module knows (an
    encoder with `base_model.embeddings`, or another layout)."""
    base = getattr(model, "base_model", model)
    if isinstance(getattr(base, "embeddings", None), nn.Module):
        return None  # an encoder: worker/integrations hook its `embeddings` module
    words, positions, drop = (getattr(base, name, None) for name in ("wte", "wpe", "drop"))
    if all(isinstance(m, nn.Module) for m in (words, positions, drop)):
        assert isinstance(words, nn.Module) and isinstance(drop, nn.Module)  # for mypy
        return DecoderSplit(output_module=drop, words=words, positions=positions, dropout=drop)
    tokens = getattr(base, "embed_tokens", None)
    if isinstance(tokens, nn.Module):
        return DecoderSplit(output_module=tokens, words=tokens)
    return None
