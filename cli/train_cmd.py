"""`smartune train`: fine-tune one model on one task locally (no Ray, no service)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from cli.completion_cmd import DIRECTORY, completes
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


_REQUIRED = {"task"}  # the one trial field `smartune train` cannot default


def _trial_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per trial field marked `cli` in worker.contract.trial (type, choices, help from there)."""
    from worker.contract.trial import KNOBS, TYPES  # torch-free: the contract

    for name, knob in KNOBS.items():
        if not knob.cli:
            continue
        flags = knob.flags or ("--" + name.replace("_", "-"),)
        kind = TYPES[name]
        options: dict[str, Any] = {"dest": f"t_{name}", "default": None, "help": knob.help}
        if name == "method":
            options["choices"] = sorted(METHOD_PRESETS)
        elif kind in (bool, bool | None):
            options["action"] = argparse.BooleanOptionalAction
        elif get_origin(kind) is Literal:
            options["choices"] = list(get_args(kind))
        elif kind in (int, int | None):
            options |= {"type": int, "metavar": "INT"}
        elif kind in (float, float | None):
            options |= {"type": float, "metavar": "FLOAT"}
        elif kind == dict[str, str] | None:
            options |= {"type": json.loads, "metavar": "JSON"}
        else:
            options["metavar"] = name.upper()
        parser.add_argument(*flags, required=name in _REQUIRED, **options)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("train", help="fine-tune one model on one task (local, no Ray)")
    _trial_flags(p)
    completes(
        p.add_argument(
            "--output", type=Path, required=True, help="folder for metrics.json and the best checkpoint"
        ),
        DIRECTORY,
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _method_flags(p)
    p.set_defaults(handler=run)


def _absolute(value: str | None) -> str | None:
    """A path given on this machine's command line means this working directory: made absolute, as the
    contract wants (worker.contract.sources). Anything else (an alias, a hub id) is left as it is."""
    if value is None or not Path(value).expanduser().exists():
        return value
    return str(Path(value).expanduser().resolve())


def config_from_args(args: argparse.Namespace) -> Any:
    """The flags, trial fields (`t_`) and method fields (`m_`) alike named flat, set into a trial's values
    as a grid's axes are (worker.contract.grid.with_values)."""
    from worker.contract.grid import with_values
    from worker.contract.trial import TrainConfig

    flags = {k[2:]: v for k, v in vars(args).items() if k[:2] in ("t_", "m_") and v is not None}
    flags["data"], flags["model"] = _absolute(flags.get("data")), _absolute(flags.get("model"))
    return TrainConfig.from_dict(with_values({}, {k: v for k, v in flags.items() if v is not None}))


def run(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from worker.training.finetune import RunCallbacks, run_training, summarize

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
        if "validation" in record:  # held-out training rows choose the best epoch (validation_fraction)
            line += f", validation {main} {record['validation'][main]:.4f}"
        (bar.write if bar is not None else print)(line + (" (best)" if is_best else ""))

    result = run_training(config, args.output, RunCallbacks(on_step=on_step, on_epoch_end=on_epoch_end))
    if bar is not None:
        bar.close()
    print(summarize(result))
    print(f"wrote {args.output / 'metrics.json'}")
    return 0
