"""A model's shape as the memory estimate reads it without loading it (service.costs.memory): parameters,
hidden size, layers, heads, MLP width and model type, from a config's fields (BERT's names or GPT-2's).
Plain data: no torch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Shape:
    params: int
    hidden: int
    layers: int
    heads: int
    source: str  # where the numbers come from
    inner: int = 0  # the MLP's width; 0: 4 x hidden (BERT's, GPT-2's)
    model_type: str = ""  # config.json's `model_type` (bert, gpt2, llama, ...): LoRA's default targets

    @property
    def mlp(self) -> int:
        return self.inner or 4 * self.hidden


# GPT-2's config names its dimensions its own way (n_embd, n_layer, n_head, n_inner, n_positions).
_GPT2_NAMES = {"hidden_size": "n_embd", "num_hidden_layers": "n_layer", "num_attention_heads": "n_head",
               "intermediate_size": "n_inner", "max_position_embeddings": "n_positions"}  # fmt: skip


def shape_from_config(config: Mapping[str, Any], source: str, model_type: str = "") -> Shape | None:
    config = {**{ours: config[theirs] for ours, theirs in _GPT2_NAMES.items() if theirs in config}, **config}
    try:
        hidden, layers = int(config["hidden_size"]), int(config["num_hidden_layers"])
    except (KeyError, TypeError, ValueError):
        return None
    heads = int(config.get("num_attention_heads") or max(1, hidden // 64))
    inner = int(config.get("intermediate_size") or 4 * hidden)
    embeddings = (int(config.get("vocab_size") or 30522) + int(config.get("max_position_embeddings") or 512)
                  + int(config.get("type_vocab_size") or 2)) * hidden  # fmt: skip
    per_layer = 4 * hidden * hidden + 2 * hidden * inner + 9 * hidden + inner  # attention, FFN, norms, biases
    kind = str(config.get("model_type") or model_type)
    return Shape(
        embeddings + layers * per_layer + hidden * hidden, hidden, layers, heads, source, inner, kind
    )
