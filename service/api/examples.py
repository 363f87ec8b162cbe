"""OpenAPI examples of job specs (shown in /docs on the submit endpoint)."""

from __future__ import annotations

from typing import Any

from fastapi.openapi.models import Example

_QUICK: dict[str, Any] = {
    "name": "quick rte smoke sweep",
    "task": "rte",
    "model": "tiny-random",
    "method": "smart",
    "training": {
        "epochs": 1,
        "batch_size": 8,
        "max_seq_length": 64,
        "max_train_samples": 32,
        "max_eval_samples": 32,
    },
    "search_space": {"axes": {"learning_rate": {"type": "grid", "values": [1e-4, 5e-4]}}},
    "seeds": [1, 2],
    "resources": {"cpus": 1, "gpus": 0},
    "limits": {"max_concurrent_trials": 1},
}

_PAPER: dict[str, Any] = {
    "name": "SMART paper grid on MRPC",
    "task": "mrpc",
    "model": "minilm-l6",
    "method": "smart",
    "search_space": {"preset": "smart-paper-grid"},
    "seeds": [1],
    "resources": {"cpus": 4, "gpus": 1},
    "priority": 10,
    "limits": {"max_concurrent_trials": 2, "time_budget_s": 86400},
}

SPEC_EXAMPLES: dict[str, Example] = {
    "quick": Example(summary="tiny CPU sweep (2 learning rates x 2 seeds)", value=_QUICK),
    "paper-grid": Example(summary="the paper's grid (36 cells) on one GPU per trial", value=_PAPER),
}
