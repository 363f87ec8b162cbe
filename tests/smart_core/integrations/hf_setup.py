"""Shared set-up of the integration tests: a tiny random BERT on RTE's head and a project session around it.

The project's side is worker.training's own `TrainingSession` and `train_step`; the integrations' side gets
a second model built from the same config and seed, so both start from the same weights. Examples are
random word pieces (no GLUE file needed), padded to one width so micro-batches and processes see the shapes
the whole batch has.
"""

from __future__ import annotations

from typing import Any

import torch

from worker.contract.tasks import get_task
from worker.contract.trial import TrainConfig
from worker.training.batching import EncodedDataset, collate
from worker.training.session import TrainingSession, task_model

WIDTH = 16  # every batch is padded to 16 tokens: (B, 16, H) noise splits by rows (tests below)
EXAMPLES = 8


def train_config(**overrides: Any) -> TrainConfig:
    base: dict[str, Any] = {"task": "rte", "model": "tiny-random", "epochs": 1, "batch_size": EXAMPLES,
                            "learning_rate": 1e-3, "device": "cpu", "seed": 3, "pad_to": WIDTH}  # fmt: skip
    return TrainConfig(**{**base, **overrides})


def random_examples(seed: int = 0) -> EncodedDataset:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(5, WIDTH + 1, (EXAMPLES,), generator=generator).tolist()
    ids = [[101, *torch.randint(1000, 5000, (n - 2,), generator=generator).tolist(), 102] for n in lengths]
    labels = torch.randint(0, 2, (EXAMPLES,), generator=generator).tolist()
    return EncodedDataset(ids, labels, [[0] * n for n in lengths])


def project_session(config: TrainConfig) -> TrainingSession:
    task = get_task(config.task)
    model, tokenizer = task_model(config, task)
    data = random_examples()
    return TrainingSession(config, task, data, {"validation": data}, model, tokenizer, torch.device("cpu"))


def fresh_model(config: TrainConfig) -> torch.nn.Module:
    """The same initial weights as `project_session(config)`'s model (same config, same seed)."""
    model, _ = task_model(config, get_task(config.task))
    return model


def rows(data: EncodedDataset) -> list[dict[str, int]]:
    """A dataset of example indices in order; `collator` turns a list of them into the project's batch."""
    return [{"index": i} for i in range(len(data))]


def collator(data: EncodedDataset, pad_id: int) -> Any:
    return lambda items: collate(data, [item["index"] for item in items], pad_id, WIDTH)


def parameters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}
