"""The calibration table learns from finished trials (called by service.engine.sync for every synced trial).

A trial that trained to its end (TERMINATED) or was stopped by ASHA after some epochs (STOPPED) logged its
throughput (`mean_examples_per_s` at its end, `examples_per_s` per epoch) and, in its provenance tags,
its whole config and device. One such trial, on one worker, adds 1 / examples_per_s (seconds per training
example) to the `calibration` row of its model x method x max_seq_length x device: a running mean whose
weight is capped at MAX_WEIGHT trials, so the row follows a deployment that changes. Each trial counts
once (`trials.calibrated`).

The memory table learns from the same trials (`memory_peaks`): a trial on a GPU logs its
`gpu_memory_peak_mb` (torch.cuda.max_memory_allocated, weights included) every epoch, and when it runs out
of memory what it held then (`gpu_memory_oom_peak_mb`, a lower bound). Every synced trial row keeps its latest metrics and its params, so the largest peak per
model x method x precision x batch size x max_seq_length is read from the rows themselves (no table of its
own); service.costs.memory takes it where it exceeds the fit. Only upward: a peak measured on short texts
(batches are padded to their longest example) says nothing about long ones.
"""

from __future__ import annotations

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from service.engine.tracking import TrialRun
from service.store.db import utcnow
from service.store.models import CalibrationRow, Trial

MAX_WEIGHT = 20  # trials a row's mean weighs at most against a new one
MEASURED_STATES = ("TERMINATED", "STOPPED")
PEAK_METRICS = ("gpu_memory_peak_mb", "gpu_memory_oom_peak_mb")  # worker.tune.trainable logs them on a GPU
MEMORY_ROWS = 5000  # the most recently updated trial rows read for memory peaks


def measurement(run: TrialRun) -> tuple[tuple[str, str, int, str], float] | None:
    """(calibration key, seconds per training example) of a finished single-worker trial, else None."""
    rate = run.metrics.get("mean_examples_per_s") or run.metrics.get("examples_per_s")
    config = run.config or {}
    if run.state not in MEASURED_STATES or not rate or rate <= 0 or run.device is None:
        return None
    if (run.workers or 1) > 1 or not {"model", "method", "max_seq_length"} <= config.keys():
        return None
    key = (str(config["model"]), str(config["method"]), int(config["max_seq_length"]), run.device)
    return key, 1.0 / float(rate)


def learn(session: Session, row: Trial, run: TrialRun) -> bool:
    """Fold the trial's measured cost into the table once; whether it did."""
    if row.calibrated:
        return False
    measured = measurement(run)
    if measured is None:
        return False
    (model, method, seq, device), seconds = measured
    entry = session.scalar(
        select(CalibrationRow).where(
            CalibrationRow.model == model,
            CalibrationRow.method == method,
            CalibrationRow.max_seq_length == seq,
            CalibrationRow.device == device,
        )
    )
    batch = (run.config or {}).get("batch_size")
    if entry is None:
        entry = CalibrationRow(model=model, method=method, max_seq_length=seq, device=device,
                               train_s_per_example=seconds, samples=0)  # fmt: skip
        session.add(entry)
    else:
        weight = min(entry.samples, MAX_WEIGHT)
        entry.train_s_per_example = (entry.train_s_per_example * weight + seconds) / (weight + 1)
    entry.samples += 1
    entry.threads, entry.batch_size = run.threads, int(batch) if isinstance(batch, int) else None
    entry.updated_at = utcnow()
    row.calibrated = True
    return True


def memory_peaks(session: Session) -> dict[tuple[str, str, str, int, int], float]:
    """(model, method, precision, batch_size, max_seq_length) -> the largest allocated peak (MiB) a trial
    measured, over finished trials and those that ran out of memory (a lower bound: what it held when an
    allocation failed), among the MEMORY_ROWS rows updated last."""
    rows = session.execute(
        select(Trial.params, Trial.metrics)
        .where(or_(Trial.state.in_(MEASURED_STATES), Trial.error_class == "oom"))
        .order_by(Trial.updated_at.desc())
        .limit(MEMORY_ROWS)
    )
    peaks: dict[tuple[str, str, str, int, int], float] = {}
    for params, metrics in rows:
        peak = max(
            (v for k in PEAK_METRICS if isinstance(v := (metrics or {}).get(k), int | float)), default=0
        )
        try:
            key = (str(params["model"]), str(params["method"]), str(params.get("precision", "auto")),
                   int(str(params["batch_size"])), int(str(params["max_seq_length"])))  # fmt: skip
        except (KeyError, TypeError, ValueError):
            continue
        if peak > 0:
            peaks[key] = max(float(peak), peaks.get(key, 0.0))
    return peaks
