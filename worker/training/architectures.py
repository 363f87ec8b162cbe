"""What differs between the model families the worker fine-tunes: encoders (BERT and its kin) and decoders
(GPT-2, Llama, Qwen2), classified through `AutoModelForSequenceClassification`.

- The tiny random aliases (worker.contract.sources): a config of the alias's architecture with its
  dimensions and the borrowed tokenizer's vocabulary and pad id, built locally (tests; no download).
- The pad token: a decoder's classification head reads the last token that is not the pad token
  (smart_core.integrations.decoder), so the model config needs `pad_token_id`. GPT-2's tokenizer has no pad
  token: its EOS token serves, as the transformers docs do for GPT-2 classification (`ensure_pad_token`).
- Which config fields `dropout` sets: each family names its dropouts differently (`DROPOUT_FIELDS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import transformers
from transformers import PreTrainedConfig, PreTrainedTokenizerBase

from worker.contract.sources import MODEL_ALIASES

if TYPE_CHECKING:  # the modeling stack is imported where a model is built (a sweep's driver never does)
    from transformers import PreTrainedModel

# Each family's config class, by name: transformers imports a class on first use, and LlamaConfig's module
# loads the modeling stack (about a second of a process's start), which a sweep's driver never needs.
CONFIG_CLASSES: dict[str, str] = {
    "bert": "BertConfig",
    "gpt2": "GPT2Config",
    "llama": "LlamaConfig",
    "qwen2": "Qwen2Config",
}

# The config fields of every dropout a family has (hidden, attention, embedding), set by `dropout`; a
# family not listed is treated as the BERT family (and refused, naming the fields, if it lacks them).
ENCODER_DROPOUTS = ("hidden_dropout_prob", "attention_probs_dropout_prob")  # BERT, RoBERTa, ELECTRA, DeBERTa
DROPOUT_FIELDS: dict[str, tuple[str, ...]] = {
    "gpt2": ("resid_pdrop", "embd_pdrop", "attn_pdrop"),
    "llama": ("attention_dropout",),  # Llama and Qwen2 have no other dropout
    "qwen2": ("attention_dropout",),
}


def dropout_fields(model_type: str) -> tuple[str, ...]:
    return DROPOUT_FIELDS.get(model_type, ENCODER_DROPOUTS)


def ensure_pad_token(tokenizer: PreTrainedTokenizerBase, name: str) -> None:
    """Give a tokenizer without a pad token its EOS token as pad (GPT-2's, Llama's base tokenizers); a
    tokenizer with neither cannot batch: ValueError naming the model."""
    if tokenizer.pad_token_id is not None:
        return
    if tokenizer.eos_token is None:
        raise ValueError(
            f"model {name!r}: its tokenizer has neither a pad nor an EOS token, so batches cannot be padded"
        )
    tokenizer.pad_token = tokenizer.eos_token


def build_tiny_random(
    name: str, overrides: Mapping[str, Any], dropout: float | None, tokenizer: PreTrainedTokenizerBase
) -> PreTrainedModel:
    """A tiny random model of the alias `name`: its dimensions, the tokenizer's vocabulary and pad id, the
    task's head (`overrides`) and, unless None, `dropout` in every dropout field of its family. The
    caller seeds the RNG."""
    alias = MODEL_ALIASES[name]
    config_class: type[PreTrainedConfig] = getattr(transformers, CONFIG_CLASSES[alias.architecture])
    values: dict[str, Any] = {
        "vocab_size": len(tokenizer),  # 30522 for MiniLM's uncased WordPiece vocabulary
        "pad_token_id": tokenizer.pad_token_id,
        **alias.config,
        **overrides,
    }
    if dropout is not None:
        values |= dict.fromkeys(dropout_fields(alias.architecture), dropout)
    if alias.architecture != "bert":
        # A decoder's config names its BOS/EOS ids (GPT-2's 50256 lies outside MiniLM's 30522 pieces): the
        # borrowed tokenizer's [CLS] and [SEP], which open and close every example.
        values |= {"bos_token_id": tokenizer.cls_token_id, "eos_token_id": tokenizer.sep_token_id}
    from transformers import AutoModelForSequenceClassification as AutoClassifier
    from transformers import PreTrainedModel

    config = config_class(**values)
    model = AutoClassifier.from_config(config)  # type: ignore[no-untyped-call]
    if not isinstance(model, PreTrainedModel):
        raise TypeError(f"{type(model).__name__} is not a transformers model")
    return model
