"""A trial's data, read and tokenised: what every trial of a sweep with the same data fields shares.

`prepare_data(config, task, tokenizer)` reads the training examples (the first `max_train_samples`, then
the seeded `train_fraction`) and every eval split, and tokenises them; `TrainingSession.build` does this
itself when it is given nothing. A sweep's driver prepares each distinct `data_key` once and hands the
result to its trials through Ray's object store, so a trial skips reading and tokenising (seconds per
trial on SST-2-sized sets). Everything here is plain data: it pickles.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from worker.contract.sources import glue_dir
from worker.contract.tasks import TaskSpec
from worker.contract.trial import TrainConfig
from worker.training.batching import EncodedDataset, encode
from worker.training.data import Example, load_examples
from worker.training.sampling import subsample, take_first

# The trial fields that decide what a trial reads and how it is tokenised (the model: its tokenizer).
DATA_FIELDS = (
    "task",
    "data",
    "columns",
    "model",
    "max_seq_length",
    "max_train_samples",
    "max_eval_samples",
    "train_fraction",
    "fraction_seed",
)


@dataclass
class PreparedData:
    train_examples: list[Example]  # what the trial trains on, as read (MLflow's dataset input is made of it)
    train: EncodedDataset
    evals: dict[str, EncodedDataset]  # eval split name -> its examples, tokenised


def data_key(config: TrainConfig) -> str:
    """Equal for two trials exactly when they read and tokenise the same data (JSON of DATA_FIELDS)."""
    values = config.to_dict()
    return json.dumps({name: values[name] for name in DATA_FIELDS}, sort_keys=True)


def load_split_examples(config: TrainConfig, task: TaskSpec, split: str) -> list[Example]:
    """One split from `config.data`; unset, the local GLUE folder ($SMARTUNE_GLUE_DIR), else the hub."""
    source = config.data or glue_dir() or "hub"
    return load_examples(task, source, split, config.columns)


def train_examples(config: TrainConfig, task: TaskSpec) -> list[Example]:
    """The training examples of `config`: the first `max_train_samples`, then the seeded `train_fraction`."""
    examples = take_first(load_split_examples(config, task, task.train_split), config.max_train_samples)
    if config.train_fraction < 1:
        examples = subsample(examples, config.train_fraction, config.fraction_seed)
    return examples


def prepare_data(config: TrainConfig, task: TaskSpec, tokenizer: Any) -> PreparedData:
    examples = train_examples(config, task)
    evals = {
        split: take_first(load_split_examples(config, task, split), config.max_eval_samples)
        for split in task.eval_splits
    }
    return PreparedData(
        train_examples=examples,
        train=encode(examples, tokenizer, config.max_seq_length, task.is_regression),
        evals={
            split: encode(split_examples, tokenizer, config.max_seq_length, task.is_regression)
            for split, split_examples in evals.items()
        },
    )
