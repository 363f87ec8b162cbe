"""Seeding a run's random generators: Python's, NumPy's and torch's (every CUDA device's too).

A module of its own (torch and NumPy only) so that a custom function's child process
(worker.tune.function_child) seeds as a trial does without importing the training loop's libraries.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch


def seed_everything(seed: int, deterministic: bool) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # needed by deterministic cuBLAS
        torch.use_deterministic_algorithms(True, warn_only=True)
