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
from worker.training.batching import collate
from worker.training.metrics import compute_metrics
from worker.training.session import TrainingSession

StepCallback = Callable[[int, int, Mapping[str, float]], None]  # (global step, total steps, last components)


class NumericsError(FloatingPointError):
    """Too many optimiser steps in a row had a non-finite loss or gradient (a diverging run); the trial
    fails with error class `numerics`."""


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
    """One optimiser update on the batch `indices`; returns the step's detached components.

    A step whose loss or total gradient norm is not finite changes no weight: the optimiser step is
    skipped and counted (`skipped_step`), and `max_skipped_steps` of them in a row raise NumericsError.
    The finiteness check is the step's one wait for the device.
    """
    batch = _to_device(collate(session.train, indices, session.pad_id, session.config.pad_to), session.device)
    labels = batch.pop("labels")
    with _autocast(session):
        loss, parts = session.objective(model_fns(session, batch), labels)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(session.model.parameters(), session.config.max_grad_norm)
    finite = bool(torch.isfinite(norm) & torch.isfinite(loss.detach()))
    if finite:
        session.optimizer.step()
        session.consecutive_skips = 0
    else:
        session.skipped_steps += 1
        session.consecutive_skips += 1
        if session.consecutive_skips >= min(session.config.max_skipped_steps, session.steps_per_epoch):
            raise NumericsError(
                f"{session.consecutive_skips} steps in a row had a non-finite loss or gradient (last: loss "
                f"{loss.item()}, gradient norm {norm.item()}) at step {session.position.global_step}; no "
                "weight was changed by them. Lower the learning rate or check the data"
            )
    session.scheduler.step()  # the schedule follows the step count, taken or skipped
    session.optimizer.zero_grad(set_to_none=True)
    session.objective.after_update()
    parts["skipped_step"] = torch.tensor(0.0 if finite else 1.0)
    if not finite:  # a skipped step's loss is not a training loss: keep the epoch mean finite
        parts = {k: v for k, v in parts.items() if k == "skipped_step" or bool(torch.isfinite(v).all())}
    return parts


def iterate_epoch(session: TrainingSession) -> Iterator[dict[str, Tensor]]:
    """Runs the rest of the current epoch from the session's position, yielding each step's components.

    The position advances after every step, so a checkpoint taken between two yields resumes exactly.
    """
    session.model.train()
    batches = session.epoch_batches(session.position.epoch)
    for indices in batches[session.position.step_in_epoch :]:
        parts = train_step(session, indices)
        sums, counts = session.epoch_sums, session.epoch_counts  # in the session's state: resumable
        for key, value in parts.items():
            value = value.detach().float().to(session.device)
            sums[key] = sums[key] + value if key in sums else value
            counts[key] = counts.get(key, 0) + 1
        session.position.step_in_epoch += 1
        session.position.global_step += 1
        yield parts
    session.position.epoch += 1
    session.position.step_in_epoch = 0


def train_epoch(session: TrainingSession, on_step: StepCallback | None = None) -> dict[str, float]:
    """The rest of the current epoch; returns the mean of each component over the steps that reported
    it (every step, but for the periodic diagnostics and a skipped step's loss terms).

    The running sums live in the session (and so in its checkpoints): a resumed epoch reports the same
    means as an uninterrupted one.
    """
    sums, counts = session.epoch_sums, session.epoch_counts
    for parts in iterate_epoch(session):
        if on_step is not None:
            loss = float(parts["loss"]) if "loss" in parts else float("nan")  # absent: a skipped step
            on_step(session.position.global_step, session.total_steps, {"loss": loss})
    means = {key: float(value) / max(1, counts.get(key, 1)) for key, value in sums.items()}
    sums.clear()
    counts.clear()
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
