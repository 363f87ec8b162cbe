"""`smartune train`: fine-tune one model on one task locally (no Ray, no service)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from smart_core.config import FIELD_CHOICES, METHOD_PRESETS, MethodConfig  # torch-free: a fast --help

_METHOD_FLAG_HELP = "(overrides the method preset; see smart_core/config.py)"


def _method_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per MethodConfig field (--lambda-s, --epsilon, --projection, ...), generated from the dataclass."""
    group = parser.add_argument_group("method hyperparameters " + _METHOD_FLAG_HELP)
    hints = {"float": float, "int": int}
    for f in dataclasses.fields(MethodConfig):
        if f.name == "method":
            continue
        flag = "--" + f.name.replace("_", "-")
        kind = str(f.type)
        if kind == "bool":
            group.add_argument(flag, dest=f"m_{f.name}", action=argparse.BooleanOptionalAction, default=None)
        elif kind in hints:
            group.add_argument(flag, dest=f"m_{f.name}", type=hints[kind], default=None, metavar=kind.upper())
        else:
            group.add_argument(flag, dest=f"m_{f.name}", choices=FIELD_CHOICES[f.name], default=None)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="fine-tune one model on one task (local, no Ray)")
    p.add_argument(
        "--task",
        required=True,
        help="rte, mrpc, sst2, cola, stsb, qqp, mnli, qnli, wnli, snli, scitail, anli_r1..3",
    )
    p.add_argument(
        "--data",
        default=None,
        help="GLUE-style folder, CSV/TSV/JSONL file or hub id (default: $SMARTUNE_GLUE_DIR)",
    )
    p.add_argument(
        "--columns", default=None, help='custom column mapping as JSON, e.g. \'{"sentence1": "premise"}\''
    )
    p.add_argument(
        "--model", default="minilm-l6", help="minilm-l6 (offline), tiny-random, a local path or a hub id"
    )
    p.add_argument("--method", default="smart", choices=sorted(METHOD_PRESETS))
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=5e-5, dest="learning_rate")
    p.add_argument("--optimizer", choices=["adam", "adamw", "radam"], default="adamw")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--warmup-fraction", type=float, default=0.1)
    p.add_argument("--max-seq-length", type=int, default=512)
    p.add_argument("--max-train-samples", type=int, default=None)
    p.add_argument("--max-eval-samples", type=int, default=None)
    p.add_argument(
        "--train-fraction", type=float, default=1.0, help="0.001, 0.01, 0.1 or 1.0 of the training set"
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=None, dest="num_threads")
    p.add_argument(
        "--output", type=Path, required=True, help="folder for metrics.json and the best checkpoint"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _method_flags(p)
    p.set_defaults(handler=run)


def config_from_args(args: argparse.Namespace) -> Any:
    from worker.config import TrainConfig

    overrides = {k[2:]: v for k, v in vars(args).items() if k.startswith("m_") and v is not None}
    columns = json.loads(args.columns) if args.columns else None
    return TrainConfig(
        task=args.task,
        data=args.data,
        model=args.model,
        method=args.method,
        method_overrides=overrides,
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        optimizer=args.optimizer,
        weight_decay=args.weight_decay,
        warmup_fraction=args.warmup_fraction,
        max_seq_length=args.max_seq_length,
        max_train_samples=args.max_train_samples,
        max_eval_samples=args.max_eval_samples,
        train_fraction=args.train_fraction,
        seed=args.seed,
        columns=columns,
        device=args.device,
        num_threads=args.num_threads,
    )


def run(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from worker.finetune import RunCallbacks, run_training, summarize

    config = config_from_args(args)
    bar: Any = None

    def on_step(_step: int, total: int, parts: Any) -> None:
        nonlocal bar
        if args.no_progress:
            return
        if bar is None:
            bar = tqdm(total=total, desc=f"{config.task}/{config.method}", unit="step")
        bar.update(1)
        bar.set_postfix(loss=f"{parts['loss']:.4f}")

    def on_epoch_end(session: Any, record: dict[str, Any], is_best: bool) -> None:
        main = session.task.main_metric
        line = f"epoch {record['epoch']}: train loss {record['train_loss']:.4f}, {main} {record['metrics'][main]:.4f}"
        (bar.write if bar is not None else print)(line + (" (best)" if is_best else ""))

    result = run_training(config, args.output, RunCallbacks(on_step=on_step, on_epoch_end=on_epoch_end))
    if bar is not None:
        bar.close()
    print(summarize(result))
    print(f"wrote {args.output / 'metrics.json'}")
    return 0
