"""What a trial reports after each epoch: the epoch as flat metrics, and its state as a Tune checkpoint.

The metrics (`epoch_metrics`, plus `gpu_peak` on a GPU) go to the trial's MLflow run and to Tune, which
optimises `score`; the state (what a retry restores) is written to a local folder and handed to a
`Reporter`, Tune's own (`tune_reporter`) in a sweep. Shared by the single-task trial (worker.tune.trainable)
and the multitask one (worker.tune.multitask_trial), so both write their checkpoints the same way.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from ray import tune

from worker.training.finetune import selection_value
from worker.tune.checkpoints import write_state, writing

PEAK_METRIC = "gpu_memory_peak_mb"  # torch.cuda.max_memory_allocated since the trial started, MiB

Reporter = Callable[[dict[str, float], Path], None]  # (epoch metrics, folder holding the epoch's state)


def gpu_peak() -> dict[str, float]:
    """{PEAK_METRIC: MiB} on a GPU (this process's current device), else nothing."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        return {}
    return {PEAK_METRIC: torch.cuda.max_memory_allocated() / 2**20}


def epoch_metrics(record: Mapping[str, Any], main: str, best: Mapping[str, Any]) -> dict[str, float]:
    """One epoch as flat floats, `best` being the epoch chosen so far (this one or an earlier record):
    `score` (the main metric that chooses: Tune optimises it, ASHA stops by it) and `best_score` (its best so
    far), `eval_*` dev metrics, `train_*` means of the objective's components (R_s, D_Breg, perturbation
    sizes, ...). `score` is the dev main metric unless the run holds out validation rows
    (`validation_fraction`): then it is theirs, their metrics are `val_*`, and `dev_score_at_best` is the
    dev main metric at the chosen epoch, the number to report."""
    out = {
        "epoch": float(record["epoch"]),
        "score": selection_value(record, main),
        "best_score": selection_value(best, main),
        "train_loss": float(record["train_loss"]),
        "train_seconds": float(record["train_seconds"]),
        "examples_per_s": float(record["examples_per_s"]),
    }
    out |= {f"eval_{k}": float(v) for k, v in record["metrics"].items()}
    out |= {f"train_{k}": float(v) for k, v in record["components"].items() if k != "loss"}
    if "validation" in record:
        out |= {f"val_{k}": float(v) for k, v in record["validation"].items()}
        out["dev_score_at_best"] = float(best["metrics"][main])
    return out


def tune_reporter(metrics: dict[str, float], folder: Path) -> None:
    """Reports the epoch to Tune; Tune copies the folder into the storage path before returning."""
    tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(str(folder)))


def report_state(report: Reporter, metrics: dict[str, float], state: dict[str, Any]) -> None:
    """The epoch's state written locally, then reported (Tune copies it into the sweep's storage). A
    write that the file system refuses becomes a StorageError (class `storage`) naming which one."""
    what = f"the epoch {int(metrics['epoch'])} checkpoint"
    with writing(f"{what} to a local temporary folder"):
        tmp_dir = tempfile.TemporaryDirectory()
    with tmp_dir as tmp:
        with writing(f"{what} to the local temporary folder {tmp}"):
            write_state(Path(tmp), state)
        with writing(f"{what} to the sweep's storage"):
            report(metrics, Path(tmp))
