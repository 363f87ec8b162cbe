"""AcceleratedSmart (smart_core.integrations.accelerated) on two CPU processes (gloo, accelerate's
`debug_launcher`) against one process with the whole batch: the same weights and teacher after two optimiser
steps. Exact because nothing random differs: no dropout, and each process draws R_s's noise for its rows
from the stream the single process draws the whole batch's from (process 1 skips process 0's rows: torch
draws normals in blocks of 16, and every (4, 16, H) block is a multiple). Two processes: integration tier."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from accelerate import Accelerator, debug_launcher
from accelerate.state import AcceleratorState

from smart_core.integrations.accelerated import AcceleratedSmart
from tests.smart_core.integrations.hf_setup import (
    EXAMPLES,
    WIDTH,
    fresh_model,
    parameters,
    random_examples,
    train_config,
)
from worker.training.batching import collate

pytestmark = pytest.mark.usefixtures("starts_processes")  # the second process is forked by the launcher
STEPS = 2


def _train(out: str, method: str) -> None:
    """Two optimiser steps on this process's share of the batch; process 0 saves weights and teacher."""
    accelerator = Accelerator(cpu=True)
    config = train_config(method=method, dropout=0.0)
    model = fresh_model(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
    model, optimizer = accelerator.prepare(model, optimizer)
    noise = torch.Generator()
    smart = AcceleratedSmart(
        accelerator, model, config.method_config(), planned_updates=STEPS, generator=noise
    )
    share = EXAMPLES // accelerator.num_processes
    rows = range(accelerator.process_index * share, (accelerator.process_index + 1) * share)
    batch = collate(random_examples(), list(rows), 0, WIDTH)
    hidden = smart.model.config.hidden_size
    for step in range(STEPS):
        noise.manual_seed(100 + step)
        torch.randn(
            (accelerator.process_index * share, WIDTH, hidden), generator=noise
        )  # the rows before ours
        smart.backward(batch)
        accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad()
        smart.after_update()
    if accelerator.is_main_process:
        reference = smart.smart.objective.reference
        shadow = list(reference.shadow) if reference is not None else []
        torch.save({"weights": parameters(smart.model), "shadow": shadow}, out)
    accelerator.wait_for_everyone()


@pytest.mark.parametrize("method", ["smart", "r3f"])
def test_two_processes_with_half_batches_match_one_with_the_whole(tmp_path: Path, method: str) -> None:
    two = tmp_path / "two.pt"
    debug_launcher(_train, args=(str(two), method), num_processes=2)
    one = tmp_path / "one.pt"
    try:
        _train(str(one), method)  # in this process, after the launch: the children forked from a clean state
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
    a: dict[str, Any] = torch.load(one, weights_only=True)
    b: dict[str, Any] = torch.load(two, weights_only=True)
    initial = parameters(fresh_model(train_config(method=method, dropout=0.0)))
    assert any(not torch.equal(initial[k], v) for k, v in a["weights"].items())  # the steps moved them
    for name, value in a["weights"].items():
        torch.testing.assert_close(b["weights"][name], value, rtol=1e-5, atol=1e-6, msg=name)
    assert len(a["shadow"]) == len(b["shadow"]) == (0 if method == "r3f" else len(a["weights"]))
    for ours, theirs in zip(b["shadow"], a["shadow"], strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
