"""What LoRA changes in a trial's memory estimate (service.costs.memory): the parameter states.

A LoRA trial (the spec's `peft` block, worker.contract.lora) freezes the base and trains rank-r adapters
and the task head. Gradients, AdamW's two moments and SMART's momentum teacher exist for trainable
parameters only, so the part of the peak that grows with the parameters shrinks to the trainable share:
the fit's `fixed_mb` (the memory that does not grow with tokens: those states, 1.4-4x the weights in
memory.json) is scaled by trainable / all parameters, and the adapters' own fp32 weights are added. The
activations (the per-token terms) are kept as measured for full fine-tuning: the frozen layers still keep
what the backward into the adapters and into SMART's perturbation needs. Not measured with LoRA on a GPU:
an estimate by this rule; trials that ran here correct it upward (service.costs.refresh), as any other.

The adapters' size comes from the model's shape: each targeted linear layer of each block adds
r x (in + out) parameters. The control plane loads no model, so the layers a name targets are read from a
table of the usual names (in units of the hidden size h and the MLP width m); a name it does not know is
costed as the largest (one h x m and one m x h layer per block). Plain functions on data: no torch, no peft.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# Linear layers per block that a target name matches (peft matches by name suffix), as (in, out) pairs:
# "h" the hidden size, "m" the MLP width, "3h" GPT-2's fused q/k/v. BERT's `dense` is three layers (the
# attention output, the MLP's two); GPT-2's `c_proj` two (the attention's and the MLP's).
TARGET_LAYERS: dict[str, tuple[tuple[str, str], ...]] = {
    **dict.fromkeys(
        ("query", "key", "value", "q_proj", "k_proj", "v_proj", "o_proj", "out_proj"), (("h", "h"),)
    ),
    "c_attn": (("h", "3h"),),
    "c_proj": (("h", "h"), ("m", "h")),
    "c_fc": (("h", "m"),),
    "dense": (("h", "h"), ("h", "m"), ("m", "h")),
    **dict.fromkeys(("gate_proj", "up_proj", "fc1", "w1", "w3"), (("h", "m"),)),
    **dict.fromkeys(("down_proj", "fc2", "w2"), (("m", "h"),)),
}
UNKNOWN_TARGET = (("h", "m"), ("m", "h"))
# peft's default targets per model type (peft.utils.constants, for the types the worker builds aliases of);
# another type is costed as fused q/k/v (the largest default).
DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "bert": ("query", "value"),
    "roberta": ("query", "value"),
    "gpt2": ("c_attn",),
    "llama": ("q_proj", "v_proj"),
    "qwen2": ("q_proj", "v_proj"),
    "mistral": ("q_proj", "v_proj"),
}
HEAD_LABELS = 3  # the head is hidden x labels (+ bias): MNLI's 3, the most of the GLUE tasks


def adapter_parameters(
    spec: Mapping[str, Any], model_type: str, hidden: int, inner: int, layers: int
) -> tuple[int, tuple[str, ...]]:
    """(the adapters' parameters over all blocks, the target names costed) of a `peft` block."""
    targets: Sequence[str] = spec.get("target_modules") or DEFAULT_TARGETS.get(model_type, ("c_attn",))
    width = {"h": hidden, "m": inner, "3h": 3 * hidden}
    r = int(spec["r"])
    per_block = sum(
        r * (width[a] + width[b])
        for name in targets
        for a, b in TARGET_LAYERS.get(name.rsplit(".", 1)[-1], UNKNOWN_TARGET)
    )
    return per_block * layers, tuple(targets)


def trainable_parameters(
    spec: Mapping[str, Any], model_type: str, hidden: int, inner: int, layers: int
) -> int:
    """The adapters and the task head: what the optimiser, the gradients and the teacher hold."""
    adapters, _ = adapter_parameters(spec, model_type, hidden, inner, layers)
    return adapters + hidden * HEAD_LABELS + HEAD_LABELS


def with_lora(
    entry: Mapping[str, Any],
    spec: Mapping[str, Any],
    *,
    params: int,
    model_type: str,
    hidden: int,
    inner: int,
    layers: int,
) -> tuple[dict[str, Any], str]:
    """`entry` (a fit of memory.json, measured or scaled) for a LoRA trial of a model of `params`
    parameters, and the note that says what was assumed."""
    trainable = trainable_parameters(spec, model_type, hidden, inner, layers)
    _, targets = adapter_parameters(spec, model_type, hidden, inner, layers)
    share = min(1.0, trainable / params)
    adapters_mb = trainable * 4 / 2**20  # fp32 adapters and head, beside the frozen weights
    scaled = {**entry, "fixed_mb": entry["fixed_mb"] * share, "weights_mb": entry["weights_mb"] + adapters_mb,
              "lora_trainable_params": trainable}  # fmt: skip
    note = (
        f"LoRA r={spec['r']} on {', '.join(targets)}: {trainable:,} trainable parameters ({100 * share:.2f}% "
        f"of {params / 1e6:.0f}M); gradients, AdamW's moments and the teacher (fixed_mb) scaled to that "
        "share, activations as for full fine-tuning (LoRA not measured on a GPU)"
    )
    return scaled, note
