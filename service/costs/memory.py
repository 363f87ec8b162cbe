"""A trial's peak accelerator memory before it runs: what it reserves per GPU (Ray's `gpu_memory_mb`), and so
how many trials share a GPU (docs/memory_packing.md).

The table (`memory.json` beside this module, fitted by research/memory_fit.py from research.memory's
measurements on a GPU) models the peak of one training update above the weights, per model x method x
precision, as fixed_mb + tokens x (per_token_mb + per_token_seq_mb x seq_len), tokens = batch x seq_len.
An estimate adds the weights and the entry's largest measured excess over its fit (the allocated peak:
what `torch.cuda.max_memory_allocated` reads), then the margins of a real process:
- ALLOCATOR_RESERVE: the caching allocator holds more than is allocated (blocks rounded to 512 B and
  2 MiB segments, fragmentation when every batch has its own padded length): x 1.2, the upper end of the
  10-20% usually seen in fine-tuning;
- CUDA_CONTEXT_MB: the CUDA context, kernel images and cuBLAS/cuDNN handles outside the allocator:
  768 MiB (a torch process on Ampere/Hopper with lazy module loading holds 0.3-0.6 GiB; assumed, not
  measured here).
A model the table has not measured is scaled from the nearest measured one (by hidden x layers) when its
shape is known (a packaged alias, a local checkpoint's config.json, the hub cache's copy of it), else
estimated as a 355M-parameter encoder (BERT-large / RoBERTa-large: the largest the paper fine-tunes).
Trials that ran here correct the table upward (service.costs.refresh.memory_peaks). A LoRA trial keeps
gradients, optimiser moments and SMART's teacher for its adapters and head only (service.costs.lora_memory).
Plain functions on data: no torch.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from service.costs.lora_memory import with_lora
from service.costs.refresh import memory_peaks
from service.costs.shapes import Shape, shape_from_config
from worker.contract.resources import Resources
from worker.contract.sources import MODEL_ALIASES, SourceError, classify
from worker.contract.spec import PLAN_OF, JobSpec

DEFAULT_PATH = Path(__file__).with_name("memory.json")
ALLOCATOR_RESERVE = 1.2  # reserved / allocated of torch's caching allocator at a trial's peak
CUDA_CONTEXT_MB = 768.0  # per process, outside the allocator
MEASURED_OPTIMIZERS = ("adam", "adamw", "radam")  # two moments per parameter each, as AdamW's measurement
FALLBACK_METHOD = "smart"  # the largest measured method: an unmeasured method (freelb, pgd) is costed as it
# The conservative shape for a model of unknown size: RoBERTa-large (hidden 1024, 24 layers, 16 heads).
CONSERVATIVE = {"params": 355_000_000, "hidden": 1024, "layers": 24, "heads": 16}
# GPUs without bf16 (compute capability < 8.0): `precision: auto` trains fp32 there.
NO_BF16 = ("V100", "T4", "P100", "P40", "P4", "K80", "TITAN V", "RTX 20", "QUADRO RTX")
# Nominal memory (decimal GB) of GPUs whose name does not say it; a name with "80GB" says it itself.
NOMINAL_GB = {"H200": 141, "GH200": 96, "H100": 80, "L40S": 48, "L40": 48, "A40": 48, "A10G": 24, "A10": 24,
              "L4": 24, "T4": 16, "RTX 4090": 24}  # fmt: skip

# model, method, precision as the spec says it, batch size, max_seq_length
Key = tuple[str, str, str, int, int]


@dataclass(frozen=True)
class MemoryTable:
    models: Mapping[str, Mapping[str, Any]]  # measured model -> names, params, hidden, layers, heads
    entries: Mapping[tuple[str, str, str], Mapping[str, Any]]  # (model, method, precision) -> fit
    source: str
    device: str | None
    corrections: Mapping[Key, float] = field(default_factory=dict)  # measured allocated peaks (MiB)

    def measured(self, model: str) -> str | None:
        """The table's name for `model` when it measured exactly that model."""
        return next((k for k, v in self.models.items() if model == k or model in v["names"]), None)


@dataclass(frozen=True)
class MemoryEstimate:
    mb: float  # what the trial reserves per GPU it uses (Ray's gpu_memory_mb), margins included, MiB
    allocated_mb: float  # the predicted peak of torch.cuda.max_memory_allocated: weights + update, MiB
    precision: str  # the precision whose entry was used
    basis: str  # "measured", "scaled", "conservative"; "+ corrected" when a trial here measured more
    entry: Mapping[str, Any]  # the fit used: model, method, precision, coefficients, source, device
    notes: tuple[str, ...] = ()

    def describe(self) -> dict[str, Any]:
        return {"mb": self.mb, "allocated_mb": round(self.allocated_mb, 1), "precision": self.precision,
                "basis": self.basis, "entry": dict(self.entry), "notes": list(self.notes),
                "margin": {"allocator_reserve": ALLOCATOR_RESERVE, "cuda_context_mb": CUDA_CONTEXT_MB}}  # fmt: skip


def from_document(document: Mapping[str, Any], corrections: Mapping[Key, float] | None = None) -> MemoryTable:
    entries = {(e["model"], e["method"], e["precision"]): e for e in document.get("entries", [])}
    return MemoryTable(models=dict(document.get("models", {})), entries=entries,
                       source=str(document.get("source", "")), device=document.get("device"),
                       corrections=dict(corrections or {}))  # fmt: skip


@lru_cache(maxsize=1)
def default_document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DEFAULT_PATH.read_text())
    return document


def default_table() -> MemoryTable:
    return from_document(default_document())


def load(session: Session) -> MemoryTable:
    """The packaged table with the peaks this deployment's trials measured (service.costs.refresh)."""
    return from_document(default_document(), memory_peaks(session))


def resolve_precision(precision: str, gpu_kind: str | None) -> tuple[str, str | None]:
    """(the table's precision, a note): `auto` is bf16 on a GPU with bf16 (worker.training.session), fp32
    on an older one; fp16 is costed as fp32 (unmeasured, and no smaller than bf16's)."""
    if precision == "auto":
        if gpu_kind and any(name in gpu_kind.upper() for name in NO_BF16):
            return "fp32", f"precision auto: fp32 on {gpu_kind} (no bf16)"
        return "bf16", "precision auto: bf16 (a GPU of compute capability 8.0 or newer)"
    if precision == "fp16":
        return "fp32", "fp16 is not measured: costed as fp32"
    return precision, None


def gpu_memory_of(kind: str | None) -> float | None:
    """Nominal MiB of one GPU named `kind` (torch.cuda.get_device_name), a little under what torch reports;
    None when the name says nothing known. For the dry run: the worker packs by what nodes advertise."""
    if not kind:
        return None
    sized = re.search(r"(\d+)\s*GB", kind, re.IGNORECASE)
    nominal = next((gb for name, gb in NOMINAL_GB.items() if name in kind.upper()), None)
    gb = int(sized.group(1)) if sized else nominal
    return math.floor(gb * 1e9 / 2**20) if gb else None


def _config_json(folder: Path) -> Mapping[str, Any] | None:
    try:
        loaded = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, Mapping) else None


def hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    return Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub"


def model_shape(model: str) -> Shape | None:
    """The shape of a model the table has not measured, from what the control plane can read without
    loading it: a packaged alias's config, a local checkpoint's config.json, the hub cache's copy."""
    alias = MODEL_ALIASES.get(model)
    if alias is not None:
        if not alias.config:
            return None
        return shape_from_config(alias.config, f"the {model} alias", alias.architecture)
    try:
        source = classify(model, "model")
    except SourceError:
        return None
    if source.kind == "local":
        config = _config_json(source.path)
        return shape_from_config(config, f"{source.path}/config.json") if config else None
    snapshots = hub_cache() / f"models--{model.replace('/', '--')}" / "snapshots"
    for snapshot in sorted(snapshots.glob("*"), reverse=True) if snapshots.is_dir() else []:
        if (config := _config_json(snapshot)) is not None:
            return shape_from_config(config, f"the hub cache's config.json of {model}")
    return None


def _scaled(entry: Mapping[str, Any], known: Mapping[str, Any], shape: Shape) -> dict[str, Any]:
    """The measured entry scaled to `shape`: fixed memory with the parameters, per-token activations with
    hidden x layers, the attention term with the larger of hidden x layers and heads x layers (measured
    MiniLM -> BERT-base grew 2.8-3x where heads x layers says 2x)."""
    p = shape.params / known["params"]
    hl = shape.hidden * shape.layers / (known["hidden"] * known["layers"])
    nl = shape.heads * shape.layers / (known["heads"] * known["layers"])
    return {**entry, "fixed_mb": entry["fixed_mb"] * p, "weights_mb": entry["weights_mb"] * p,
            "per_token_mb": entry["per_token_mb"] * hl, "per_token_seq_mb": entry["per_token_seq_mb"] * max(hl, nl),
            "max_residual_mb": entry["max_residual_mb"] * max(p, hl), "scaled_from": entry["model"]}  # fmt: skip


def _measured_shape(table: MemoryTable, known: str) -> Shape:
    """The shape of a model the table measured (BERT-family: MLP 4 x hidden unless it says otherwise)."""
    m = table.models[known]
    return Shape(int(m["params"]), int(m["hidden"]), int(m["layers"]), int(m["heads"]), "memory.json",
                 int(m.get("inner") or 0), str(m.get("model_type") or "bert"))  # fmt: skip


def _nearest(table: MemoryTable, shape: Shape) -> str:
    size = shape.hidden * shape.layers
    return min(
        table.models,
        key=lambda m: abs(math.log(size / (table.models[m]["hidden"] * table.models[m]["layers"]))),
    )


def estimate_memory_mb(
    model: str,
    method: str,
    precision: str,
    batch_size: int,
    seq_len: int,
    optimizer: str = "adamw",
    *,
    shape: Shape | None = None,
    gpu_kind: str | None = None,
    table: MemoryTable | None = None,
    peft: Mapping[str, Any] | None = None,
) -> MemoryEstimate:
    """One trial's peak memory per GPU: its entry (measured, scaled or conservative) at batch x seq_len,
    weights and the fit's excess added, then the allocator's reserve and the CUDA context. `peft` (a
    trial's LoRA block) shrinks the parameter states to the trainable share (service.costs.lora_memory)."""
    table = table or default_table()
    used, note = resolve_precision(precision, gpu_kind)
    notes = [note] if note else []
    if optimizer not in MEASURED_OPTIMIZERS:
        notes.append(f"optimizer {optimizer}: not measured, costed as AdamW")
    known = table.measured(model)
    basis = "measured"
    if known is None:
        shape = shape or model_shape(model)
        if shape is None:
            shape, basis = (
                Shape(source="the conservative rule", model_type="roberta", **CONSERVATIVE),
                "conservative",
            )
            notes.append(f"shape of {model!r} unknown: estimated as a 355M-parameter encoder (RoBERTa-large)")
        else:
            basis = "scaled"
        known = _nearest(table, shape)
    entry = table.entries.get((known, method, used))
    if entry is None:
        entry = table.entries[(known, FALLBACK_METHOD, used)]
        notes.append(f"method {method}: not measured, costed as {FALLBACK_METHOD} (the largest measured)")
    if basis != "measured":
        assert shape is not None
        entry = _scaled(entry, table.models[known], shape)
        notes.append(f"scaled from {known} to {shape.params / 1e6:.0f}M parameters, hidden {shape.hidden}, "
                     f"{shape.layers} layers ({shape.source})")  # fmt: skip
    if peft is not None:
        dims = shape if basis != "measured" and shape is not None else _measured_shape(table, known)
        entry, note = with_lora(entry, peft, params=dims.params, model_type=dims.model_type,
                                hidden=dims.hidden, inner=dims.mlp, layers=dims.layers)  # fmt: skip
        notes.append(note)
    tokens = batch_size * seq_len
    update = entry["fixed_mb"] + tokens * (entry["per_token_mb"] + entry["per_token_seq_mb"] * seq_len)
    allocated = entry["weights_mb"] + update + entry["max_residual_mb"]
    seen = table.corrections.get((model, method, precision, batch_size, seq_len))
    if seen is not None and seen > allocated:
        notes.append(
            f"corrected: a trial here peaked at {seen:.0f} MiB allocated (predicted {allocated:.0f})"
        )
        allocated, basis = seen, f"{basis} + corrected"
    described = {k: entry[k] for k in ("model", "method", "precision", "fixed_mb", "per_token_mb",
                                       "per_token_seq_mb", "weights_mb", "max_residual_mb",
                                       "lora_trainable_params") if k in entry}  # fmt: skip
    described |= {"source": table.source, "device": table.device}
    mb = math.ceil(allocated * ALLOCATOR_RESERVE + CUDA_CONTEXT_MB)
    return MemoryEstimate(float(mb), allocated, used, basis, described, tuple(notes))


def trial_estimate(
    spec: JobSpec, trial: Mapping[str, Any], *, gpu_kind: str | None, table: MemoryTable | None = None
) -> MemoryEstimate:
    """A trial config (JobSpec.trials()'s dict) of `spec`: its own batch size, length, method, precision."""
    return estimate_memory_mb(str(trial.get("model") or spec.model), str(trial["method"]),
                              str(trial.get("precision") or "auto"), int(trial["batch_size"]),
                              int(trial["max_seq_length"]), str(trial.get("optimizer") or "adamw"),
                              gpu_kind=gpu_kind, table=table, peft=trial.get("peft"))  # fmt: skip


def spec_estimate(spec: JobSpec, *, gpu_kind: str | None, table: MemoryTable | None = None) -> MemoryEstimate:
    """The largest estimate over the spec's trials: one figure per job (what the spec carries)."""
    return max((trial_estimate(spec, t, gpu_kind=gpu_kind, table=table) for t in spec.trials()),
               key=lambda e: e.mb)  # fmt: skip


def pin(spec: JobSpec, *, gpu_kind: str | None, table: MemoryTable | None = None) -> JobSpec:
    """`spec` as it is stored at submission (before it is hashed): `resources.gpu_memory_mb` set to its
    estimate when it asks for GPUs and names none (the driver packs its trials by this figure), and, where
    the deployment's GPU is known (`SMARTUNE_GPU_KIND`), `resources.gpus` raised to that memory's share of
    the GPU (`Resources.packed_gpus`), so that the scheduler, the budget and the driver count one fraction."""
    if spec.resources.gpus == 0:
        return spec
    document = json.loads(spec.canonical_json())  # parsed again it means the same trials (JobSpec)
    resources = document["resources"]
    if spec.resources.gpu_memory_mb is None:
        resources["gpu_memory_mb"] = spec_estimate(spec, gpu_kind=gpu_kind, table=table).mb
    resources["gpus"] = Resources.model_validate(resources).packed_gpus(gpu_memory_of(gpu_kind))
    if resources == json.loads(spec.canonical_json())["resources"]:
        return spec
    # A new object (no cached canonical JSON of the old one), with the old one's plan: the same trials.
    return JobSpec.model_validate(document, context={PLAN_OF: spec})
