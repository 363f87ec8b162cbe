"""One trial's configuration, declared once: every field with its default, bounds, help and where it may be
set. The spec's `training` block (worker.contract.spec), the flags of `smartune train` (cli.train_cmd), the
axes a grid may sweep (worker.contract.grid) and the values a trial accepts are all derived from here.

A trial is one fine-tuning run; `TrainConfig` is plain data, JSON-able. Defaults follow the paper's
recipe (Section 4.1): Adam, linear decay with 10% warm-up, clipping at 1, 512 word pieces.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, get_args

from smart_core.config import MethodConfig, method_config
from worker.contract.lora import lora_spec

OptimizerName = Literal["adam", "adamw", "radam"]
OPTIMIZERS: tuple[str, ...] = get_args(OptimizerName)
PrecisionName = Literal["auto", "fp32", "bf16", "fp16"]
PRECISIONS: tuple[str, ...] = get_args(PrecisionName)
# How `max_train_samples` / `max_eval_samples` pick rows: a seeded sample stratified by label and source
# genre (worker.training.sampling), or the first N in file order (what every capped run did before).
SamplingName = Literal["random", "head"]
# Which side a batch's padding goes: the tokenizer's own (`padding_side` in its tokenizer_config.json;
# right for MiniLM), or as named. Decoders read each row's last real token either way.
PaddingSide = Literal["auto", "left", "right"]
SAMPLINGS: tuple[str, ...] = get_args(SamplingName)


@dataclass(frozen=True)
class Knob:
    """What the declaration says of one field: bounds, help, and where it may be set.

    spec: in the job spec's `training` block; cli: a flag of `smartune train` (`flags`, else
    `--field-name`); sweep: a grid/search axis (machine-level knobs are not: they are the deployment's)."""

    help: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    spec: bool = False
    cli: bool = True
    sweep: bool = True
    flags: tuple[str, ...] = ()
    # Absent from the spec's canonical JSON while at its default: a field added after specs were hashed
    # leaves their hashes as they were (worker.contract.spec).
    omit_default: bool = False

    def violation(self, value: Any) -> str | None:
        """Why `value` breaks the bounds, or None (None values are for optional fields, checked by type)."""
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if isinstance(value, float) and not math.isfinite(value):
            return "must be a finite number"
        checks: tuple[tuple[float | None, Callable[[float], bool], str], ...] = (
            (self.ge, lambda b: value >= b, ">="),
            (self.gt, lambda b: value > b, ">"),
            (self.le, lambda b: value <= b, "<="),
            (self.lt, lambda b: value < b, "<"),
        )
        for bound, ok, text in checks:
            if bound is not None and not ok(bound):
                return f"must be {text} {bound:g}"
        return None


def knob(default: Any = None, *, factory: Callable[[], Any] | None = None, **info: Any) -> Any:
    if factory is not None:
        return field(default_factory=factory, metadata={"knob": Knob(**info)})
    return field(default=default, metadata={"knob": Knob(**info)})


@dataclass
class TrainConfig:
    task: str = knob("rte", help="a GLUE-style task: rte, mrpc, sst2, cola, stsb, qqp, mnli, qnli, wnli, ...")
    data: str | None = knob(
        None, sweep=False, help="absolute path to a GLUE-style folder or table file, or a hub dataset id "
        "(default: $SMARTUNE_GLUE_DIR, else the hub)"
    )  # fmt: skip
    model: str = knob("minilm-l6", sweep=False,
                      help="minilm-l6 (offline), tiny-random, an absolute checkpoint path or a hub id")  # fmt: skip
    method: str = knob("smart", help="a method preset (smart_core.METHOD_PRESETS)")
    # The method's own fields over its preset (e.g. {"lambda_s": 3.0}), as the spec's `method_params`
    # writes them; flags and axes use their names (worker.contract.grid.with_values).
    method_params: dict[str, Any] = knob(factory=dict, cli=False, sweep=False, help="method fields")
    epochs: int = knob(3, ge=1, le=100, spec=True, help="training epochs")
    batch_size: int = knob(32, ge=1, le=4096, spec=True, help="examples per update")
    learning_rate: float = knob(
        5e-5, gt=0, lt=1, spec=True, flags=("--lr", "--learning-rate"), help="peak LR"
    )
    optimizer: OptimizerName = knob("adamw", spec=True, help="adam, adamw or radam")
    weight_decay: float = knob(0.0, ge=0, spec=True, help="decoupled weight decay (the paper: 0, Adam)")
    warmup_fraction: float = knob(0.1, ge=0, lt=1, spec=True, help="linear warm-up share of the updates")
    max_grad_norm: float = knob(1.0, gt=0, spec=True, help="gradient-norm clipping")
    max_skipped_steps: int = knob(
        10, ge=1, spec=True, help="non-finite steps in a row (each skipped) that end the trial as `numerics`"
    )
    max_seq_length: int = knob(512, ge=8, le=8192, spec=True, help="word pieces per example (the paper: 512)")
    max_train_samples: int | None = knob(None, ge=1, spec=True, help="N training examples (see sampling)")
    max_eval_samples: int | None = knob(
        None, ge=1, spec=True, help="N examples of each eval split (see sampling)"
    )
    sampling: SamplingName = knob(
        "random", spec=True, help="how max_train_samples and max_eval_samples pick rows: random (seeded by "
        "fraction_seed, stratified by label and by the file's source genre) or head (the first N in file order)"
    )  # fmt: skip
    train_fraction: float = knob(1.0, gt=0, le=1, help="share of the training set: 0.001 / 0.01 / 0.1 / 1")
    fraction_seed: int = knob(
        13, spec=True, help="seed of which rows are used (sampling, train_fraction, validation_fraction), "
        "fixed across trials: every method and seed sees the same rows"
    )  # fmt: skip
    validation_fraction: float = knob(
        0.0, ge=0, lt=1, spec=True, sweep=False, help="share of the training rows held out (seeded by "
        "fraction_seed, stratified) to choose the best epoch and trial on; dev is then only reported, at the "
        "chosen epoch. 0: choose on dev"
    )  # fmt: skip
    seed: int = knob(1, help="the trial's seed (weights of the head, batches, dropout, noise)")
    columns: dict[str, str] | None = knob(
        None, sweep=False, help='custom table columns as JSON, e.g. {"sentence1": "premise"}'
    )
    device: str = knob("auto", sweep=False, help="auto | cpu | cuda | cuda:N")
    precision: PrecisionName = knob(
        "auto", spec=True, help="fp32 | bf16 | fp16 autocast (fp16 with a gradient scaler); auto: bf16 on a "
        "GPU that supports it, else fp32. SMART's perturbation and divergences stay fp32 either way"
    )  # fmt: skip
    grad_accum_steps: int = knob(
        1, ge=1, le=1024, spec=True, help="forward/backward passes per update: each batch of batch_size "
        "examples is split into this many micro-batches (the same update in less memory)"
    )  # fmt: skip
    compile: bool = knob(
        False,
        spec=True,
        sweep=False,
        help="torch.compile the encoder (slower first steps, faster later ones)",
    )
    deterministic: bool = knob(True, spec=True, help="torch deterministic algorithms (warn-only)")
    workers: int = knob(
        1, ge=1, le=16, spec=True, sweep=False, help="data-parallel ranks of the trial, one process each: "
        "with N GPUs per trial, one GPU per rank (the default is then N); on CPU, gloo ranks sharing its threads"
    )  # fmt: skip
    dropout: float | None = knob(
        None, ge=0, lt=1, spec=True, help="every dropout of the model (encoder hidden and attention, the "
        "task head); unset: the checkpoint's own and the task's head dropout. 0: none at all"
    )  # fmt: skip
    peft: dict[str, Any] | None = knob(
        None, cli=False, sweep=False, help="parameter-efficient fine-tuning (the spec's `peft` block, "
        "worker.contract.lora): LoRA adapters on a frozen model; unset: every weight trains"
    )  # fmt: skip
    num_threads: int | None = knob(
        None, ge=1, le=512, sweep=False, flags=("--threads",), help="torch CPU threads"
    )
    length_grouping: bool = knob(True, spec=True, help="length-grouped batches (dynamic padding)")
    padding_side: PaddingSide = knob(
        "auto", spec=True, sweep=False, omit_default=True, help="where a batch's padding goes: left or right; auto: the "
        "tokenizer's own side. Left is for decoders (positions follow the attention mask there)"
    )  # fmt: skip
    pad_to: int | None = knob(
        None, ge=1, cli=False, sweep=False, help="pad every batch to this length (benchmarks)"
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            if not _has_type(getattr(self, f.name), TYPES[f.name]):
                raise ValueError(
                    f"invalid value for {f.name}: {getattr(self, f.name)!r} is not {_type_name(f.name)}"
                )
            problem = KNOBS[f.name].violation(getattr(self, f.name))
            if problem:
                raise ValueError(f"invalid value for {f.name}: {getattr(self, f.name)!r} {problem}")
        if self.grad_accum_steps > self.batch_size:
            raise ValueError(
                f"invalid value for grad_accum_steps: {self.grad_accum_steps} micro-batches of a batch of "
                f"{self.batch_size} examples (at most batch_size)"
            )
        if self.workers > 1 and self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(
                f"invalid value for device: {self.device!r} with {self.workers} workers (each rank takes its "
                "own GPU: use auto, cuda or cpu)"
            )
        if self.workers > self.batch_size:
            raise ValueError(
                f"invalid value for workers: {self.workers} ranks share batches of {self.batch_size} examples "
                "(at most batch_size)"
            )
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"invalid value for optimizer: {self.optimizer!r} ({', '.join(OPTIMIZERS)})")
        self.method_config()  # validates the method name and its overrides now, not mid-run
        lora_spec(self.peft)  # a ValueError naming `peft.<field>`

    def method_config(self) -> MethodConfig:
        return method_config(self.method, **self.method_params)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["resolved_method"] = self.method_config().to_dict()
        return out

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrainConfig:
        """A trial's values (`to_dict`'s, or a plan's); also as recorded before a rename (`current_names`)."""
        values = current_names(values)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known - {"resolved_method"})
        if unknown:
            raise ValueError(f"unknown training option(s): {', '.join(unknown)}")
        return cls(**{k: v for k, v in values.items() if k in known})


# Names a trial's values had before a rename -> their names now. Read, never written: Tune's experiment
# state of a job begun before the rename (its trial configs, resumed by the next attempt) and MLflow's
# records of its runs (`smartune.prov.config`, what an audit re-runs) still use the old names.
RENAMED = {"method_overrides": "method_params"}


def current_names(values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a trial's values under today's names (RENAMED); a name given both ways is refused."""
    out = dict(values)
    for old, new in RENAMED.items():
        if old in out:
            if new in out:
                raise ValueError(f"{old} and {new} are one field (now {new}): give it once")
            out[new] = out.pop(old)
    return out


# Fields added after records were written -> the value that reproduces those records. A trial's whole
# values read back from a record (Tune's experiment state, `smartune.prov.config`) without one were made
# before it existed: a capped run then read the first rows in file order, and every batch was padded on
# the right. Only for whole records: a
# partial set of values (`smartune train`'s flags) takes the declared defaults.
ADDED = {"sampling": "head", "padding_side": "right"}


def recorded_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded trial's values under today's names, with the fields added since it was written (ADDED)."""
    return {**ADDED, **current_names(values)}


KNOBS: dict[str, Knob] = {f.name: f.metadata["knob"] for f in fields(TrainConfig)}
TYPES: dict[str, Any] = typing.get_type_hints(TrainConfig)  # field -> its annotation, resolved


def _has_type(value: Any, annotation: Any) -> bool:
    """Whether `value` is of the declared type, strictly (a grid value is checked as a typed field would
    be: "3", 3.5 or True is no `int`, "1e-4" no `float`; an `int` is a `float`)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_has_type(value, arm) for arm in typing.get_args(annotation))
    if origin is Literal:
        return value in typing.get_args(annotation)
    if annotation is type(None):
        return value is None
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, origin or annotation)


def _type_name(name: str) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false", dict: "a mapping"}
    arms = [a for a in typing.get_args(TYPES[name]) or (TYPES[name],) if a is not type(None)]
    return " or ".join(names.get(typing.get_origin(a) or a, str(a)) for a in arms)
