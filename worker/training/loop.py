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
from worker.training.batching import EncodedDataset, collate
from worker.training.metrics import compute_metrics
from worker.training.ranks import (
    all_reduce_gradients,
    all_reduce_sum,
    broadcast_from_main,
    check_in_step,
    rank_seed,
    shard,
)
from worker.training.session import TrainingSession

StepCallback = Callable[[int, int, Mapping[str, float]], None]  # (global step, total steps, last components)


class NumericsError(FloatingPointError):
    """Too many optimiser steps in a row had a non-finite loss or gradient (a diverging run); the trial
    fails with error class `numerics`."""


def _autocast(session: TrainingSession) -> contextlib.AbstractContextManager[None]:
    if session.autocast_dtype is not None:  # perturbation and divergences stay fp32 (smart_core.precision)
        return torch.autocast(session.device.type, dtype=session.autocast_dtype)
    return contextlib.nullcontext()


def micro_batches(indices: list[int], parts: int) -> list[list[int]]:
    """`indices` split into at most `parts` consecutive, nearly equal, non-empty chunks."""
    size, extra = divmod(len(indices), parts)
    chunks, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        if end > start:
            chunks.append(indices[start:end])
        start = end
    return chunks


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

    With `grad_accum_steps` > 1 the batch runs as that many micro-batches, each loss weighted by its share
    of the examples, so the update is the whole batch's mean (every objective term is a mean over examples).
    A step whose loss or total gradient norm is not finite changes no weight: the optimiser step is
    skipped and counted (`skipped_step`), and `max_skipped_steps` of them in a row raise NumericsError;
    under fp16 an overflowing gradient with a finite loss is the scaler's business (it lowers its scale)
    and does not count towards that limit. The finiteness check is the step's one wait for the device.

    With several ranks (worker.training.ranks) each takes its share of the batch, weighted by that share
    of the whole batch; the summed gradients, loss and components are then those of the whole batch, the
    same on every rank, and so is every decision below.
    """
    scaler = session.scaler
    total = len(indices)
    mine, share = shard(micro_batches(indices, session.ranks.world), session.ranks)
    loss: torch.Tensor | None = None
    parts: dict[str, Tensor] = {}
    for chunk in micro_batches(mine, session.config.grad_accum_steps):
        batch = _to_device(
            collate(session.train, chunk, session.pad_id, session.config.pad_to, session.padding_side),
            session.device,
        )
        labels = batch.pop("labels")
        with _autocast(session):
            chunk_loss, chunk_parts = session.objective(model_fns(session, batch), labels)
        weight = share * len(chunk) / total
        scaler.scale(chunk_loss * weight).backward()  # type: ignore[no-untyped-call]
        loss = chunk_loss.detach() * weight if loss is None else loss + chunk_loss.detach() * weight
        for key, value in chunk_parts.items():
            parts[key] = parts[key] + value.detach() * weight if key in parts else value.detach() * weight
    assert loss is not None  # a batch has at least one example
    if session.ranks.parallel:
        all_reduce_gradients(session.trainable)  # still scaled under fp16: every rank has the same scale
        summed = all_reduce_sum({**parts, "": loss})
        loss = summed.pop("")
        parts = summed
    scaler.unscale_(session.optimizer)  # clipping sees true gradients; a no-op unless fp16
    norm = torch.nn.utils.clip_grad_norm_(session.model.parameters(), session.config.max_grad_norm)
    loss_finite = bool(torch.isfinite(loss))
    finite = loss_finite and bool(torch.isfinite(norm))
    if finite:
        scaler.step(session.optimizer)
        session.consecutive_skips = 0
    else:
        session.skipped_steps += 1
        scaler_overflow = scaler.is_enabled() and loss_finite
        session.consecutive_skips += 0 if scaler_overflow else 1
        if session.consecutive_skips >= min(session.config.max_skipped_steps, session.steps_per_epoch):
            raise NumericsError(
                f"{session.consecutive_skips} steps in a row had a non-finite loss or gradient (last: loss "
                f"{loss.item()}, gradient norm {norm.item()}) at step {session.position.global_step}; no "
                "weight was changed by them. Lower the learning rate or check the data"
            )
    scaler.update()  # fp16: a lower scale after an overflow, a higher one after enough clean steps
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
    if session.ranks.parallel:
        _start_rank_epoch(session)
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
    if session.ranks.parallel:  # cheap (a few sums per tensor), once an epoch: diverged ranks stop the run
        check_in_step(_replicated(session), "weights or teacher")
    session.position.epoch += 1
    session.position.step_in_epoch = 0


def _replicated(session: TrainingSession) -> list[Tensor]:
    """What every rank holds the same: the model's weights and buffers, and SMART's momentum teacher."""
    reference = session.objective.reference
    return list(session.model.state_dict().values()) + (list(reference.shadow) if reference else [])


def _start_rank_epoch(session: TrainingSession) -> None:
    """Before a data-parallel epoch: the first time, every rank takes rank 0's weights and teacher (as DDP
    does when it wraps a model); at an epoch's start, ranks other than 0 reseed their own RNG stream."""
    if not session.synchronized:
        broadcast_from_main(_replicated(session))
        session.synchronized = True
    if session.ranks.rank > 0 and session.position.step_in_epoch == 0:
        torch.manual_seed(rank_seed(session.config.seed, session.ranks.rank, session.position.epoch))


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


def predict(session: TrainingSession, split: str) -> tuple[np.ndarray, np.ndarray]:
    """(predictions, labels) on an eval split: class ids, or floats for regression."""
    return _predict(session, session.evals[split], session.eval_batches(split))


@torch.no_grad()
def _predict(
    session: TrainingSession, data: EncodedDataset, batches: list[list[int]]
) -> tuple[np.ndarray, np.ndarray]:
    session.model.eval()
    outputs, labels = [], []
    for indices in batches:
        batch = _to_device(collate(data, indices, session.pad_id, side=session.padding_side), session.device)
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


def evaluate_validation(session: TrainingSession) -> dict[str, float] | None:
    """The task's metrics on the held-out training rows (`validation_fraction`), or None without them."""
    if session.validation is None:
        return None
    predictions, labels = _predict(session, session.validation, session.batches_of(session.validation))
    return compute_metrics(session.task, predictions, labels)
