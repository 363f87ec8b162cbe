"""The training loop: one epoch of updates and one evaluation, as plain functions on a session.

Generic: nothing here is SMART-specific (the method lives in smart_core.Objective). No files, no
logging: progress goes to an optional `on_step` callback, results are returned.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping

import numpy as np
import torch
from torch import Tensor

from smart_core import ModelFns
from worker.batching import collate
from worker.metrics import compute_metrics
from worker.session import TrainingSession

StepCallback = Callable[[int, int, Mapping[str, float]], None]  # (global step, total steps, last components)


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or inf (a diverging run); the trial fails with class `nan`."""


def _autocast(session: TrainingSession) -> contextlib.AbstractContextManager[None]:
    if session.bf16 and session.device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)  # perturbation and divergences stay fp32
    return contextlib.nullcontext()


def _to_device(batch: Mapping[str, Tensor], device: torch.device) -> dict[str, Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def model_fns(session: TrainingSession, batch: Mapping[str, Tensor]) -> ModelFns:
    adapter = session.adapter
    return ModelFns(
        embed=lambda: adapter.embed(batch),
        forward=lambda emb: adapter.forward_from_embeddings(batch, emb),
        mask=batch["attention_mask"],
    )


def train_step(session: TrainingSession, indices: list[int]) -> dict[str, Tensor]:
    """One optimiser update on the batch `indices`; returns the step's detached components."""
    batch = _to_device(collate(session.train, indices, session.pad_id, session.config.pad_to), session.device)
    labels = batch.pop("labels")
    with _autocast(session):
        loss, parts = session.objective(model_fns(session, batch), labels)
    if not bool(torch.isfinite(loss)):
        raise NonFiniteLossError(
            f"non-finite training loss {loss.item()} at step {session.position.global_step}"
        )
    loss.backward()
    torch.nn.utils.clip_grad_norm_(session.model.parameters(), session.config.max_grad_norm)
    session.optimizer.step()
    session.scheduler.step()
    session.optimizer.zero_grad(set_to_none=True)
    session.objective.after_update()
    return parts


def iterate_epoch(session: TrainingSession) -> Iterator[dict[str, Tensor]]:
    """Runs the rest of the current epoch from the session's position, yielding each step's components.

    The position advances after every step, so a checkpoint taken between two yields resumes exactly.
    """
    session.model.train()
    batches = session.epoch_batches(session.position.epoch)
    for indices in batches[session.position.step_in_epoch :]:
        parts = train_step(session, indices)
        sums = session.epoch_sums  # part of the session's state, so a resumed epoch keeps its history
        for key, value in parts.items():
            sums[key] = sums[key] + value.float() if key in sums else value.float()
        session.position.step_in_epoch += 1
        session.position.global_step += 1
        yield parts
    session.position.epoch += 1
    session.position.step_in_epoch = 0


def train_epoch(session: TrainingSession, on_step: StepCallback | None = None) -> dict[str, float]:
    """The rest of the current epoch; returns the mean of each component over all of its steps.

    The running sums live in the session (and so in its checkpoints): a resumed epoch reports the same
    means as an uninterrupted one.
    """
    sums = session.epoch_sums
    for parts in iterate_epoch(session):
        if on_step is not None:
            on_step(session.position.global_step, session.total_steps, {"loss": float(parts["loss"])})
    means = {key: float(value) / session.steps_per_epoch for key, value in sums.items()}
    sums.clear()
    return means


@torch.no_grad()
def predict(session: TrainingSession, split: str) -> tuple[np.ndarray, np.ndarray]:
    """(predictions, labels) on an eval split: class ids, or floats for regression."""
    session.model.eval()
    outputs, labels = [], []
    for indices in session.eval_batches(split):
        batch = _to_device(collate(session.evals[split], indices, session.pad_id), session.device)
        labels.append(batch.pop("labels").cpu())
        with _autocast(session):
            out = session.adapter.forward(batch).float()
        outputs.append(out if session.task.is_regression else out.argmax(dim=-1))
    session.model.train()
    return torch.cat(outputs).cpu().numpy(), torch.cat(labels).numpy()


def evaluate(session: TrainingSession) -> dict[str, float]:
    """GLUE metrics on every eval split; the second and later splits (MNLI mismatched) get a suffix."""
    metrics: dict[str, float] = {}
    for i, split in enumerate(session.task.eval_splits):
        predictions, labels = predict(session, split)
        suffix = "" if i == 0 else "_mm" if split.endswith("mismatched") else f"_{split}"
        metrics |= {
            f"{name}{suffix}": value
            for name, value in compute_metrics(session.task, predictions, labels).items()
        }
    return metrics
