"""A custom training function for smartune (docs/custom_functions.md): a logistic-regression probe on a
seeded synthetic data set, small enough to run in a second on one CPU.

smartune calls `train(config, reporter, data_roots)` in each trial:
- `config`: the trial's values as a plain dict: its trial fields (`seed`, `epochs`, `learning_rate`,
  `batch_size`, ...) and this function's own axes (`features` here, swept in linear_probe.yaml);
- `reporter.report(metrics, checkpoint_dir=None)`: once per epoch; `metrics` must hold the job's
  `function.metric` (`accuracy`); the folder, if given, becomes the epoch's Tune checkpoint, and
  `reporter.checkpoint` is the folder a restarted trial resumes from;
- `data_roots`: the folders the team may read (a real probe would read its features from under one).
Whatever it raises ends its trial FAILED with class `user`; the sweep's other trials go on.
Seeded by smartune from `config["seed"]` (random, numpy, torch) before the call, so an audit's re-run
reports the same numbers.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch


def _data(features: int, seed: int, rows: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of `features` Gaussian values labelled by a fixed random hyperplane (plus 10% flipped labels)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, features, generator=generator)
    w = torch.randn(features, generator=generator)
    y = (x @ w > 0).float()
    flip = torch.rand(rows, generator=generator) < 0.1
    return x, torch.where(flip, 1 - y, y)


def train(config: dict[str, Any], reporter: Any, data_roots: list[Path]) -> None:  # noqa: ARG001 (synthetic data)
    features = int(config.get("features", 8))
    if features < 1:
        raise ValueError(f"features must be at least 1, got {features}")
    x, y = _data(features, int(config["seed"]))
    split = len(x) * 3 // 4
    model = torch.nn.Linear(features, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=float(config["learning_rate"]))
    start = 0
    if reporter.checkpoint is not None:  # a restarted trial: the weights and epoch it reported last
        state = torch.load(Path(reporter.checkpoint) / "probe.pt")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["epoch"])
    loss_fn = torch.nn.BCEWithLogitsLoss()
    with tempfile.TemporaryDirectory() as folder:
        for epoch in range(start, int(config["epochs"])):
            for batch in torch.split(torch.arange(split), int(config["batch_size"])):
                optimizer.zero_grad()
                loss = loss_fn(model(x[batch]).squeeze(-1), y[batch])
                loss.backward()
                optimizer.step()
            with torch.no_grad():
                logits = model(x[split:]).squeeze(-1)
                accuracy = float(((logits > 0).float() == y[split:]).float().mean())
                dev_loss = float(loss_fn(logits, y[split:]))
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1}
            torch.save(state, Path(folder) / "probe.pt")
            reporter.report({"accuracy": accuracy, "dev_loss": dev_loss}, checkpoint_dir=folder)
