"""Shared set-up of the decoder and LoRA tests: tiny random decoders (no download), random word-piece
examples and a project session around them, as tests/smart_core/integrations/hf_setup does for BERT."""

from __future__ import annotations

from typing import Any

import torch

from worker.contract.tasks import get_task
from worker.contract.trial import TrainConfig
from worker.training.batching import EncodedDataset
from worker.training.session import TrainingSession, task_model

DECODERS = ("tiny-random-gpt2", "tiny-random-llama", "tiny-random-qwen2")
LORA = {"method": "lora", "r": 4, "alpha": 8}
EXAMPLES = 8


def train_config(model: str, **overrides: Any) -> TrainConfig:
    base: dict[str, Any] = {"task": "rte", "model": model, "epochs": 1, "batch_size": EXAMPLES,
                            "learning_rate": 1e-2, "device": "cpu", "seed": 3}  # fmt: skip
    return TrainConfig(**{**base, **overrides})


def random_examples(seed: int = 0, longest: int = 16) -> EncodedDataset:
    """EXAMPLES pairs of random word pieces, [CLS] ... [SEP] (MiniLM's ids), of lengths 5..longest."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(5, longest + 1, (EXAMPLES,), generator=generator).tolist()
    ids = [[101, *torch.randint(1000, 5000, (n - 2,), generator=generator).tolist(), 102] for n in lengths]
    labels = torch.randint(0, 2, (EXAMPLES,), generator=generator).tolist()
    return EncodedDataset(ids, labels, [[0] * n for n in lengths])


def session_for(config: TrainConfig) -> TrainingSession:
    task = get_task(config.task)
    model, tokenizer = task_model(config, task)
    data = random_examples()
    return TrainingSession(config, task, data, {"validation": data}, model, tokenizer, torch.device("cpu"))
