"""A trial's data, read and tokenised: what every trial of a sweep with the same data fields shares.

`prepare_data(config, task, tokenizer)` reads the training rows (`max_train_samples` of them, picked as
`sampling` says, then the seeded `train_fraction`, less the held-out `validation_fraction`) and every eval
split (`max_eval_samples` of each, picked the same way), and tokenises them; `TrainingSession.build` does
this itself when it is given nothing. Every pick is seeded by `fraction_seed`, never the trial's seed, so
all methods and seeds of a sweep use the same rows; their digests (`rows`) go into the run's provenance.
A sweep's driver prepares each distinct `data_key` once and hands the result to its trials through Ray's
object store, so a trial skips reading and tokenising (seconds per trial on SST-2-sized sets). Everything
here is plain data: it pickles.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from worker.contract.sources import glue_dir
from worker.contract.tasks import TaskSpec
from worker.contract.trial import TrainConfig
from worker.training.batching import EncodedDataset, encode
from worker.training.data import Example, load_examples
from worker.training.sampling import rows_sha256, select_rows, split_validation, strata, subsample

# The trial fields that decide what a trial reads and how it is tokenised (the model: its tokenizer).
DATA_FIELDS = (
    "task",
    "data",
    "columns",
    "model",
    "max_seq_length",
    "max_train_samples",
    "max_eval_samples",
    "sampling",
    "train_fraction",
    "fraction_seed",
    "validation_fraction",
)


@dataclass
class PreparedData:
    train_examples: list[Example]  # what the trial trains on, as read (MLflow's dataset input is made of it)
    train: EncodedDataset
    evals: dict[str, EncodedDataset]  # eval split name -> its examples, tokenised
    validation: EncodedDataset | None = None  # held-out training rows that choose the epoch; None: dev does
    rows: dict[str, str] = field(default_factory=dict)  # which rows: TrainingRows.digests


@dataclass(frozen=True)
class TrainingRows:
    """The training split divided: the rows trained on, the rows held out to choose on, and their digests
    (`train_rows_sha256`, and `validation_rows_sha256` when rows are held out: `rows_sha256`)."""

    train: list[Example]
    validation: list[Example]
    digests: dict[str, str]


def data_key(config: TrainConfig) -> str:
    """Equal for two trials exactly when they read and tokenise the same data (JSON of DATA_FIELDS)."""
    values = config.to_dict()
    return json.dumps({name: values[name] for name in DATA_FIELDS}, sort_keys=True)


def load_split_examples(config: TrainConfig, task: TaskSpec, split: str) -> list[Example]:
    """One split from `config.data`; unset, the local GLUE folder ($SMARTUNE_GLUE_DIR), else the hub."""
    source = config.data or glue_dir() or "hub"
    return load_examples(task, source, split, config.columns)


def training_rows(config: TrainConfig, task: TaskSpec, examples: list[Example]) -> TrainingRows:
    """The training split's rows `config` uses: `max_train_samples` (as `sampling` says), then the seeded
    `train_fraction`, then `validation_fraction` of those held out; all seeded by `fraction_seed`."""
    keys = strata(examples, task.is_regression)
    rows = select_rows(keys, config.max_train_samples, config.fraction_seed, config.sampling)
    if config.train_fraction < 1:
        rows = subsample(rows, config.train_fraction, config.fraction_seed)
    held: list[int] = []
    if config.validation_fraction > 0:
        rows, held = split_validation(keys, rows, config.validation_fraction, config.fraction_seed)
    digests = {"train_rows_sha256": rows_sha256(rows)}
    if held:
        digests["validation_rows_sha256"] = rows_sha256(held)
    return TrainingRows([examples[i] for i in rows], [examples[i] for i in held], digests)


def train_examples(config: TrainConfig, task: TaskSpec) -> list[Example]:
    """The examples `config` trains on (`training_rows` of the training split, without the held-out ones)."""
    return training_rows(config, task, load_split_examples(config, task, task.train_split)).train


def eval_examples(config: TrainConfig, task: TaskSpec, split: str) -> list[Example]:
    """`max_eval_samples` rows of an eval split, picked as `sampling` says with `fraction_seed`: the same
    rows for every trial and seed."""
    examples = load_split_examples(config, task, split)
    keys = strata(examples, task.is_regression)
    return [
        examples[i] for i in select_rows(keys, config.max_eval_samples, config.fraction_seed, config.sampling)
    ]


def prepare_data(config: TrainConfig, task: TaskSpec, tokenizer: Any) -> PreparedData:
    rows = training_rows(config, task, load_split_examples(config, task, task.train_split))
    evals = {split: eval_examples(config, task, split) for split in task.eval_splits}

    def encoded(examples: list[Example]) -> EncodedDataset:
        return encode(examples, tokenizer, config.max_seq_length, task.is_regression)

    return PreparedData(
        train_examples=rows.train,
        train=encoded(rows.train),
        evals={split: encoded(split_examples) for split, split_examples in evals.items()},
        validation=encoded(rows.validation) if rows.validation else None,
        rows=rows.digests,
    )
