"""Fine-tune one model on one task: the run that `smartune train` and each sweep trial execute.

The edge of the loop: it builds the session, runs epochs, evaluates after each, keeps the best
checkpoint (safetensors + tokenizer + config) and writes `metrics.json`. Reporting to a terminal,
Ray Tune or MLflow goes through `RunCallbacks`. The best epoch is chosen on the held-out validation rows
when the run has them (`validation_fraction`), else on dev (`selection_value`); dev is reported either way.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.contract.tasks import TaskSpec
from worker.contract.trial import TrainConfig
from worker.training.loop import StepCallback, evaluate, evaluate_validation, train_epoch
from worker.training.lora import is_lora, save_lora
from worker.training.models import describe_model, model_digest, set_label_names
from worker.training.parallel import data_parallel
from worker.training.provenance import dataset_provenance, environment
from worker.training.session import TrainingSession

EpochCallback = Callable[[TrainingSession, dict[str, Any], bool], None]  # (session, epoch record, is best)


@dataclass
class RunCallbacks:
    on_step: StepCallback | None = None
    on_epoch_end: EpochCallback | None = None


def save_checkpoint(session: TrainingSession, directory: Path) -> Path:
    """The session's model as a Hugging Face folder (`save_model`)."""
    return save_model(session.model, session.task, session.tokenizer, directory)


def save_model(model: Any, task: TaskSpec, tokenizer: Any, directory: Path) -> Path:
    """A task's model as a Hugging Face folder: model.safetensors, config.json (with the task's label names
    as id2label/label2id) and the tokenizer. A LoRA model is saved merged, with its adapter and head in
    `adapter/` (worker.training.lora.save_lora)."""
    directory.mkdir(parents=True, exist_ok=True)
    set_label_names(model.config, task.labels)
    if is_lora(model):
        save_lora(model, directory)
    else:
        model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def better(task_main: str, value: float, best: float | None) -> bool:
    del task_main  # every GLUE metric is "higher is better"
    return best is None or value > best


def selection_value(record: Mapping[str, Any], main: str) -> float:
    """What chooses the best epoch: the main metric on the held-out validation rows when the epoch has
    them (`record["validation"]`), else on dev (`record["metrics"]`)."""
    return float((record.get("validation") or record["metrics"])[main])


def best_record(records: list[dict[str, Any]], main: str) -> dict[str, Any] | None:
    """The chosen epoch of `records` (the first of equals), or None before the first."""
    return max(records, key=lambda r: selection_value(r, main)) if records else None


def run_training(
    config: TrainConfig,
    output_dir: Path | None,
    callbacks: RunCallbacks | None = None,
    session: TrainingSession | None = None,
    history: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Train to the last epoch and return the metrics document (also written to output_dir/metrics.json).

    `session` and `history` let a caller resume a restored session with the epochs already done; without
    a session, one is built, on `config.workers` data-parallel ranks (worker.training.parallel).
    """
    started = time.perf_counter()
    if session is None:
        with data_parallel(config) as ranks:
            return _train(
                config, output_dir, callbacks, TrainingSession.build(config, ranks), history, started
            )
    return _train(config, output_dir, callbacks, session, history, started)


def _train(
    config: TrainConfig,
    output_dir: Path | None,
    callbacks: RunCallbacks | None,
    session: TrainingSession,
    history: list[dict[str, Any]] | None,
    started: float,  # time.perf_counter() when the run began (its build included)
) -> dict[str, Any]:
    callbacks = callbacks or RunCallbacks()
    initial_digest = model_digest(session.model) if session.position.global_step == 0 else None
    main = session.task.main_metric
    epochs: list[dict[str, Any]] = list(history or [])
    best = best_record(epochs, main)
    train_seconds = sum(r["train_seconds"] for r in epochs)
    while session.position.epoch < config.epochs:
        epoch = session.position.epoch
        tick = time.perf_counter()
        components = train_epoch(session, callbacks.on_step)
        seconds = time.perf_counter() - tick
        train_seconds += seconds
        metrics = evaluate(session)
        record = {
            "epoch": epoch + 1,
            "train_loss": components.get("loss", float("nan")),
            "components": components,
            "metrics": metrics,
            "train_seconds": seconds,
            "examples_per_s": len(session.train) / seconds if seconds > 0 else 0.0,
        }
        validation = evaluate_validation(session)
        if validation is not None:
            record["validation"] = validation
        epochs.append(record)
        is_best = best is None or better(main, selection_value(record, main), selection_value(best, main))
        if is_best:
            best = record
            if output_dir is not None:
                save_checkpoint(session, output_dir / "best")
        if callbacks.on_epoch_end is not None:
            callbacks.on_epoch_end(session, record, is_best)
    assert best is not None  # epochs >= 1
    result = {
        "task": config.task,
        "main_metric": main,
        "best": best["metrics"],  # dev, at the chosen epoch
        "best_epoch": best["epoch"],
        "selected_on": "validation" if "validation" in best else "dev",
        **({"best_validation": best["validation"]} if "validation" in best else {}),
        "epochs": epochs,
        "examples_per_s": len(session.train) * len(epochs) / train_seconds if train_seconds > 0 else 0.0,
        "wall_seconds": time.perf_counter() - started,
        "train_examples": len(session.train),
        "eval_examples": {split: len(data) for split, data in session.evals.items()},
        "validation_examples": len(session.validation) if session.validation is not None else 0,
        "nonfinite_skips": session.objective.nonfinite_skips,
        "config": config.to_dict(),
        "provenance": {
            **environment(session.device, config.deterministic),
            "precision": session.precision,
            "workers": session.ranks.world,
            "model_source": describe_model(config.model),
            "initial_model_sha256": initial_digest,
            **dataset_provenance(config.data),
            **session.rows,  # which rows: train_rows_sha256 (and validation_rows_sha256)
        },
    }
    if output_dir is not None:
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / "metrics.json").write_text(json.dumps(result, indent=2, default=str))
        if best is not None:
            result["checkpoint"] = str(output_dir / "best")
    return result


def summarize(result: Mapping[str, Any]) -> str:
    """One line for a terminal: the chosen epoch's dev main metric (and what chose it) and the throughput."""
    main = result["main_metric"]
    chosen = (
        f", chosen on validation {result['best_validation'][main]:.4f}" if "best_validation" in result else ""
    )
    return (
        f"{result['task']}: best {main} = {result['best'][main]:.4f} at epoch {result['best_epoch']}{chosen} "
        f"({result['examples_per_s']:.1f} examples/s)"
    )
