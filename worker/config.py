"""The resolved configuration of one fine-tuning run (one trial): a plain dataclass, JSON-able.

The job spec (worker/spec.py) describes a whole sweep; a trial is one `TrainConfig`. Defaults follow the
paper's recipe (Section 4.1): Adam, linear decay with 10% warm-up, clipping at 1, 512 word pieces.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from smart_core.config import MethodConfig, method_config

OptimizerName = Literal["adam", "adamw", "radam"]


@dataclass
class TrainConfig:
    task: str = "rte"  # a key of worker.tasks.TASKS
    data: str | None = None  # GLUE-style folder, a table file, or a hub id; None = $SMARTUNE_GLUE_DIR
    model: str = "minilm-l6"  # alias (minilm-l6, tiny-random), local path or hub id
    method: str = "smart"  # a preset of smart_core.METHOD_PRESETS
    method_overrides: dict[str, Any] = field(default_factory=dict)  # e.g. {"lambda_s": 3.0}
    epochs: int = 3
    batch_size: int = 32
    learning_rate: float = 5e-5
    optimizer: OptimizerName = "adamw"
    weight_decay: float = 0.0  # explicit: the paper used Adam, i.e. no decoupled decay
    warmup_fraction: float = 0.1  # linear warm-up over this fraction of all updates, then linear decay
    max_grad_norm: float = 1.0
    # A step whose gradient norm or loss is not finite is skipped (no NaN reaches the weights); this many
    # skips in a row (or a whole epoch's steps, if fewer) stop the trial with error class `numerics`.
    max_skipped_steps: int = 10
    max_seq_length: int = 512  # the paper's; examples use 128 to fit a CPU
    max_train_samples: int | None = None  # the first N training examples (smoke runs)
    max_eval_samples: int | None = None  # the first N examples of each eval split
    train_fraction: float = 1.0  # 0.001 / 0.01 / 0.1 / 1.0: the domain-adaptation study
    fraction_seed: int = 13  # sampling seed of the training fraction, fixed across trials
    seed: int = 1
    columns: dict[str, str] | None = None  # canonical column -> file column, for custom tables
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    bf16: bool | None = None  # autocast to bf16; None = on CUDA only. Perturbation and divergences stay fp32
    deterministic: bool = True  # torch.use_deterministic_algorithms (warn-only where unsupported)
    num_threads: int | None = None  # torch CPU threads; recorded in provenance either way
    length_grouping: bool = True  # length-grouped batches (dynamic padding); False = random batches
    pad_to: int | None = None  # pad every batch to this length (benchmarks only)

    def __post_init__(self) -> None:
        checks = {
            "epochs": self.epochs >= 1,
            "batch_size": self.batch_size >= 1,
            "learning_rate": self.learning_rate > 0,
            "weight_decay": self.weight_decay >= 0,
            "warmup_fraction": 0 <= self.warmup_fraction < 1,
            "max_grad_norm": self.max_grad_norm > 0,
            "max_skipped_steps": self.max_skipped_steps >= 1,
            "max_seq_length": self.max_seq_length >= 8,
            "train_fraction": 0 < self.train_fraction <= 1,
            "max_train_samples": self.max_train_samples is None or self.max_train_samples >= 1,
            "max_eval_samples": self.max_eval_samples is None or self.max_eval_samples >= 1,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"invalid value for {bad[0]}: {getattr(self, bad[0])!r}")
        if self.optimizer not in ("adam", "adamw", "radam"):
            raise ValueError(f"invalid value for optimizer: {self.optimizer!r} (adam, adamw or radam)")
        self.method_config()  # validates the method name and its overrides now, not mid-run

    def method_config(self) -> MethodConfig:
        return method_config(self.method, **self.method_overrides)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["resolved_method"] = self.method_config().to_dict()
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known - {"resolved_method"})
        if unknown:
            raise ValueError(f"unknown training option(s): {', '.join(unknown)}")
        return cls(**{k: v for k, v in values.items() if k in known})
