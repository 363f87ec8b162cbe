"""Two optimiser steps of AcceleratedSmart, as one process with the whole batch or as `python -m` this module
with two CPU processes (gloo, accelerate's `debug_launcher`) sharing it. The launcher forks, so it runs in a
fresh interpreter: forking a pytest worker that holds Ray's or gRPC's threads can deadlock the children."""

from __future__ import annotations

import sys

import torch
from accelerate import Accelerator, debug_launcher

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

STEPS = 2


def train(out: str, method: str) -> None:
    """Two optimiser steps on this process's share of the batch; process 0 saves weights and teacher."""
    accelerator = Accelerator(cpu=True)
    config = train_config(method=method, dropout=0.0)
    model = fresh_model(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
    model, optimizer = accelerator.prepare(model, optimizer)
    if accelerator.process_index > 0:
        # After DDP's own broadcast in `prepare`: AcceleratedSmart must start every process from process 0's
        # weights itself (a model it is given unprepared has had none).
        with torch.no_grad():
            for param in accelerator.unwrap_model(model).parameters():
                param.add_(1.0)
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


if __name__ == "__main__":  # python -m tests.smart_core.integrations.accelerated_run OUT METHOD
    debug_launcher(train, args=(sys.argv[1], sys.argv[2]), num_processes=2)
