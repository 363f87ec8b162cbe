"""LoRA on a sequence-classification model (the spec's `peft` block, worker.contract.lora), with `peft`.

`apply_lora` wraps the model with `peft.get_peft_model` and `task_type=SEQ_CLS`: every base weight is
frozen, each targeted linear layer gains trainable A (r x in) and B (out x r, zero at the start, so the
wrapped model computes what the base computed), and the task head (`classifier` for BERT, `score` for the
decoders) is trained whole as a module to save. What trains is then `requires_grad`, which the optimiser
(worker.training.session) and SMART's momentum teacher (smart_core.bregman) take, so the teacher holds a
copy of the adapters and the head only.

What is kept of a LoRA trial:
- the trial's checkpoint (its Tune state) holds the trainable tensors only (`trainable_state`): the frozen
  base is what `resolve_model` rebuilds from the same name and seed;
- the best model (worker.training.finetune.save_model) is written twice: merged (`merged_copy`: B·A·α/r
  added into each base weight, the wrappers removed) as a plain transformers folder, which
  `from_pretrained`, a pipeline and the MLflow transformers flavour load as they load any model; and the
  adapter alone under `adapter/` (peft's `save_pretrained`: adapter_config.json and the adapters' and the
  head's weights), to load onto the base with `PeftModel.from_pretrained`.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from worker.contract.lora import LoraSpec

if TYPE_CHECKING:  # transformers' modeling stack is imported where a model is handled (the driver never is)
    from peft import PeftModel
    from transformers import PreTrainedModel

ADAPTER_DIR = "adapter"  # the adapter's folder inside a saved best model


def apply_lora(model: PreTrainedModel, spec: LoraSpec) -> PeftModel:
    """`model` with LoRA adapters (the caller seeds the RNG: A's initialisation draws from it). Raises
    ValueError naming `peft.target_modules` when none of the named modules is in the model."""
    # Imported here: peft takes seconds to import (it loads accelerate), and only LoRA trials need it.
    from peft import LoraConfig, PeftModel, TaskType, get_peft_model
    from transformers.pytorch_utils import Conv1D

    config = LoraConfig(
        task_type=TaskType.SEQ_CLS,  # the head (`classifier` / `score`) is trained whole
        r=spec.r,
        lora_alpha=spec.alpha,
        lora_dropout=spec.dropout,
        target_modules=list(spec.target_modules) if spec.target_modules is not None else None,
        bias="none",
        # GPT-2's attention and MLP are transformers' Conv1D, whose weight is stored (in, out).
        fan_in_fan_out=any(isinstance(m, Conv1D) for m in model.modules()),
    )
    try:
        wrapped = get_peft_model(model, config)
    except ValueError as err:  # no module matched, or no default for the architecture
        linear = sorted(
            {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear | Conv1D)}
        )
        raise ValueError(
            f"peft.target_modules: {spec.target_modules or 'the default'} adapts nothing in "
            f"{type(model).__name__}, whose linear layers are named {', '.join(linear)} ({err})"
        ) from err
    if not isinstance(wrapped, PeftModel):
        raise TypeError(f"get_peft_model returned {type(wrapped).__name__}, not a PeftModel")
    return wrapped


def is_lora(model: Any) -> bool:
    """Whether `model` is a peft model (without importing peft: a model of its classes has loaded it)."""
    return type(model).__module__.startswith("peft.") and callable(getattr(model, "merge_and_unload", None))


def trainable_counts(model: torch.nn.Module) -> tuple[int, int]:
    """(trainable, all) parameter counts: what the optimiser and the teacher hold vs the model's size."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The trainable tensors of `model` by their state-dict names, detached copies (the adapters and the
    head of a LoRA model)."""
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def load_trainable_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Put `trainable_state`'s tensors back; a state that names other parameters, or misses a trainable
    one, is refused (it belongs to another model or another LoRA configuration)."""
    expected = {name: tuple(p.shape) for name, p in model.named_parameters() if p.requires_grad}
    found = {name: tuple(t.shape) for name, t in state.items()}
    if found != expected:
        extra, missing = sorted(set(found) - set(expected))[:3], sorted(set(expected) - set(found))[:3]
        resized = sorted(n for n in set(found) & set(expected) if found[n] != expected[n])[:3]
        raise ValueError(
            f"the checkpoint's trainable tensors do not match this LoRA model (unexpected {extra}, missing "
            f"{missing}, another shape {resized})"
        )
    result = model.load_state_dict(state, strict=False)
    if result.unexpected_keys:
        raise ValueError(f"unexpected tensors in the checkpoint: {result.unexpected_keys[:3]}")


def merged_copy(model: PeftModel) -> PreTrainedModel:
    """A plain transformers model equal to `model` (adapters merged into the base weights), leaving
    `model` as it is. Costs one copy of the model while it exists (on the model's device)."""
    from transformers import PreTrainedModel

    merged = copy.deepcopy(model).merge_and_unload()
    if not isinstance(merged, PreTrainedModel):
        raise TypeError(f"merge_and_unload returned {type(merged).__name__}, not a transformers model")
    return merged


def save_lora(model: PeftModel, directory: Path) -> None:
    """The merged model as a transformers folder in `directory`, and the adapter in `directory/adapter`."""
    merged_copy(model).save_pretrained(directory)
    model.save_pretrained(str(directory / ADAPTER_DIR))
