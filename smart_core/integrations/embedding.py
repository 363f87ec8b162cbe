"""Hugging Face adapter for the model-agnostic SMART core: perturb the embedding-layer OUTPUT, once.

Shared by the project's own loop (worker.training, which re-exports it from worker.training.adapter) and the
Trainer and accelerate integrations beside it, so every loop splits the model the same way.

SMART (docs/architecture.md §4) perturbs ``x_i``, the output of the model's embedding layer (word + position +
token-type embeddings, LayerNorm, dropout). The official mt-dnn code feeds that output back in as
``inputs_embeds``, so Hugging Face adds position/type embeddings and applies LayerNorm and dropout a second
time (smart_algorithms.md §2 bug 1, §9 pitfall 3): the clean and the perturbed paths then differ even at
zero noise. This adapter instead runs the full model with a forward hook on ``model.base_model.embeddings``
that REPLACES that module's output with the given tensor, so the tensor enters the encoder as-is. The hook
is architecture-generic (BERT, RoBERTa, DeBERTa, ELECTRA all expose ``base_model.embeddings``) and the
model's own mask handling, pooling and head run unchanged. Decoders (GPT-2, Llama, Qwen2) compute their
embedding output inline; smart_core.integrations.decoder names the module whose output it is (GPT-2's
embedding dropout, Llama's ``embed_tokens``) and gives them positions from the attention mask. A
``peft.PeftModel`` (LoRA) is split through the transformers model it wraps.

The baselines perturb elsewhere, as their papers and code do: FreeLB, R3F and PGD add δ to the *word*
embeddings, before position/type embeddings, LayerNorm and dropout (`perturb_site: word-embeddings`). The
same hook then sits on the word-embedding module (``model.get_input_embeddings()``), so the rest of the
embedding layer runs on the perturbed tensor. On MiniLM the embedding-layer output has ~8x the RMS of the
word embeddings (0.48 vs 0.062), so a step size borrowed from those papers is only meaningful at their site.

Cost note: the replaced module still computes its (discarded) output inside the hooked call; that is a
gather (+ LayerNorm), negligible next to the encoder.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from smart_core.config import PerturbSite
from smart_core.integrations.decoder import decoder_split

# Batch keys the adapter forwards to the model (labels are deliberately not passed: losses are computed by
# the SMART core, not by the model).
_MODEL_INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


class EmbeddingAdapter:
    """Splits a sequence-classification model at its embedding-layer output.

    ``embed(batch)`` gives ``x`` (B, T, H); ``forward_from_embeddings(batch, x + delta)`` gives the logits
    for the perturbed embeddings; ``forward(batch)`` is the plain model (eval, teacher). Logits are (B, C)
    for classification and (B,) for regression.
    """

    def __init__(self, model: nn.Module, is_regression: bool, site: PerturbSite = "embedding-output") -> None:
        # `model`: a transformers PreTrainedModel, or a PEFT model around one. A PEFT model (LoRA) is split
        # through the transformers model it wraps: the adapters sit inside its linear layers, and the
        # wrapper's forward only passes the inputs on (worker.training.lora).
        core: Any = unwrap_peft(model)  # the PreTrainedModel (duck-typed: config, base_model, forward)
        self.model: Any = core
        self.is_regression = is_regression
        self.site = site
        # A decoder's embedding layer has no module of its own (smart_core.integrations.decoder).
        self.decoder = decoder_split(core)
        embeddings = (
            self.decoder.output_module if self.decoder else getattr(core.base_model, "embeddings", None)
        )
        if not isinstance(embeddings, nn.Module):
            raise TypeError(
                f"{type(core).__name__} has no `base_model.embeddings` module and is not a decoder this adapter "
                "knows (GPT-2's `wte`/`wpe`/`drop`, Llama's `embed_tokens`): the SMART adapter needs the "
                "embedding layer as a submodule to perturb its output"
            )
        self.embeddings: nn.Module = embeddings
        words = core.get_input_embeddings()
        if site == "word-embeddings" and not isinstance(words, nn.Module):
            raise TypeError(f"{type(core).__name__} has no input embeddings to perturb")
        # The module whose output the perturbed tensor replaces.
        self._replaced: nn.Module = words if site == "word-embeddings" else embeddings
        num_labels = core.config.num_labels
        if is_regression and num_labels != 1:
            raise ValueError(f"regression needs a model with num_labels=1, got {num_labels}")
        if not is_regression and (num_labels is None or num_labels < 2):
            raise ValueError(f"classification needs a model with num_labels >= 2, got {num_labels}")
        # Keyword arguments each module accepts, read once: the batch is filtered to these.
        self._embed_params = set(inspect.signature(embeddings.forward).parameters)
        self._model_params = set(inspect.signature(core.forward).parameters)
        # The head is everything outside the encoder (BERT: `classifier`; RoBERTa/ELECTRA: `classifier.*`;
        # DeBERTa: `pooler` + `classifier`). Identity comparison, since tied weights share Parameter objects.
        # Frozen parameters (the original head beside LoRA's trainable copy) take no gradient: left out.
        encoder_ids = {id(p) for p in core.base_model.parameters()}
        self._head_params = [p for p in core.parameters() if id(p) not in encoder_ids and p.requires_grad]

    # -- the split ---------------------------------------------------------------------------------------

    def embed(self, batch: Mapping[str, Tensor]) -> Tensor:
        """The tensor to perturb (B, T, H), with grad into the embedding parameters: the word embeddings,
        or the embedding-layer output.

        The latter is called with the same keyword arguments the base model passes (position ids left to
        the module, so RoBERTa's padding-aware positions match), and in the module's current train/eval
        mode, so embedding dropout is applied here once, as in a plain forward.
        """
        if self.site == "word-embeddings":
            return self._checked(self._replaced(batch["input_ids"]))
        if self.decoder is not None:
            return self._checked(self.decoder.embed(batch))
        kwargs: dict[str, Any] = {"input_ids": batch["input_ids"]}
        if "token_type_ids" in batch and "token_type_ids" in self._embed_params:
            kwargs["token_type_ids"] = batch["token_type_ids"]
        if "mask" in self._embed_params and "attention_mask" in batch:
            # DeBERTa's embeddings zero padded positions with the attention mask, as its model does.
            kwargs["mask"] = batch["attention_mask"]
        return self._checked(self.embeddings(**kwargs))

    @staticmethod
    def _checked(out: Any) -> Tensor:
        if not isinstance(out, Tensor) or out.dim() != 3:
            raise TypeError(f"embedding module returned {type(out).__name__}, expected a (B, T, H) tensor")
        return out

    def forward_from_embeddings(self, batch: Mapping[str, Tensor], embeddings: Tensor) -> Tensor:
        """Logits when the perturbed module's output is replaced by ``embeddings`` (B, T, H).

        At the embedding-output site the tensor enters the encoder exactly as given (no second
        position/type embedding, LayerNorm or dropout); at the word-embedding site the rest of the
        embedding layer runs on it. Gradients flow from the logits into ``embeddings`` and the encoder/head parameters. The
        attention mask is passed to the model, so padded positions are masked as usual.
        """
        with self._replace_embedding_output(embeddings) as calls:
            logits = self._logits(self.model(**self._model_kwargs(batch)))
        if calls[0] != 1:
            raise RuntimeError(
                f"the perturbed module ran {calls[0]} times in one forward; expected exactly once"
            )
        return logits

    def forward(self, batch: Mapping[str, Tensor]) -> Tensor:
        """Plain forward through the same path: ``forward_from_embeddings(batch, embed(batch))``."""
        return self.forward_from_embeddings(batch, self.embed(batch))

    def head_parameters(self) -> list[nn.Parameter]:
        """The task head's parameters (outside ``base_model``), for cheap per-step gradient diagnostics."""
        return list(self._head_params)

    # -- internals ---------------------------------------------------------------------------------------

    def _model_kwargs(self, batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """The batch's model inputs that this model's forward accepts (DistilBERT has no token types); a
        decoder's are ids, mask and positions from the mask."""
        if self.decoder is not None:
            return self.decoder.model_kwargs(batch)
        return {k: batch[k] for k in _MODEL_INPUT_KEYS if k in batch and k in self._model_params}

    def _logits(self, output: Any) -> Tensor:
        """(B, C) logits, or (B,) for regression: the (B, 1) head output squeezed explicitly, never broadcast."""
        logits: Tensor = output.logits
        if logits.dim() != 2:
            raise RuntimeError(f"expected (B, C) logits, got shape {tuple(logits.shape)}")
        if self.is_regression:
            if logits.shape[1] != 1:
                raise RuntimeError(f"regression expects (B, 1) logits, got {tuple(logits.shape)}")
            return logits[:, 0]  # (B, 1) -> (B,)
        return logits

    @contextmanager
    def _replace_embedding_output(self, replacement: Tensor) -> Iterator[list[int]]:
        """Register a forward hook whose return value replaces the embedding module's output.

        Yields a one-element counter of hook calls; the hook is removed on exit, even on error, so a plain
        ``model(**batch)`` afterwards is unaffected.
        """
        calls = [0]

        def hook(_module: nn.Module, _args: tuple[Any, ...], _kwargs: dict[str, Any], output: Any) -> Tensor:
            calls[0] += 1
            if not isinstance(output, Tensor) or output.shape != replacement.shape:
                shape = tuple(output.shape) if isinstance(output, Tensor) else type(output).__name__
                raise ValueError(
                    f"replacement embeddings {tuple(replacement.shape)} do not match the embedding output {shape}"
                )
            return replacement

        handle = self._replaced.register_forward_hook(hook, with_kwargs=True)
        try:
            yield calls
        finally:
            handle.remove()


def unwrap_peft(model: Any) -> Any:
    """The transformers model inside a `peft.PeftModel` (its LoRA layers injected in place), else `model`.
    Duck-typed: smart_core does not import peft."""
    if type(model).__module__.startswith("peft.") and callable(getattr(model, "get_base_model", None)):
        return model.get_base_model()
    return model


def compile_encoder(model: nn.Module) -> None:
    """`torch.compile` the encoder in place (its state dict keeps its keys): the embedding layer, where
    SMART's adapter hooks in, stays eager. Shapes vary with length-grouped batches: dynamic."""
    encoder = getattr(getattr(model, "base_model", model), "encoder", None)
    if not isinstance(encoder, torch.nn.Module):
        raise ValueError(f"compile: {type(model).__name__} has no `encoder` module to compile")
    encoder.compile(dynamic=True)
