"""A custom function's side of a trial (docs/custom_functions.md): importing it, the reporter it is handed,
and the call that turns whatever it raises into a `UserFunctionError` (class `user`).

The function is `fn(config, reporter, data_roots)`: `config` the trial's values (its trial fields and
its own axes' values, a plain dict), `reporter.report(metrics, checkpoint_dir=None)` once per epoch,
`data_roots` the folders the team may read. Where reports go is the caller's (`Send` and `Log`: Tune and
MLflow in a sweep, a list in an audit or a unit test), so this module imports neither Ray nor MLflow.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from worker.contract.errors import StorageError, UserFunctionError
from worker.contract.trial import TrainConfig

# Written into a reported checkpoint folder beside the function's files: the epoch and best score it
# holds, so a restored trial goes on numbering its epochs (and choosing its best) where it stopped.
PROGRESS_FILE = "smartune_progress.json"


class EpochReporter(Protocol):
    """What the function is handed: `Reporter` in the trial's process, or its proxy in the function's
    own process (worker.tune.function_child), which forwards each report to the trial's `Reporter`."""

    checkpoint: Path | None

    def report(self, metrics: Mapping[str, float], checkpoint_dir: str | Path | None = None) -> None: ...


UserFunction = Callable[[dict[str, Any], EpochReporter, list[Path]], object]
Send = Callable[[dict[str, float], Path | None], None]  # (the epoch's metrics, its checkpoint folder) to Tune
Log = Callable[[dict[str, float], int], None]  # (the epoch's metrics, the epoch) to the trial's run


class ReportRefused(ValueError):
    """A report the trial cannot use (its metric missing, a value not a number, no such folder): the
    function's mistake, raised in the function (worker.tune.function_process sends it back there)."""


def one_line(err: BaseException) -> str:
    """`<type>: <message>`, whitespace folded, at most 900 characters (the reason adds its prefix)."""
    return f"{type(err).__name__}: {' '.join(str(err).split()) or 'no message'}"[:900]


def load_function(entrypoint: str) -> UserFunction:
    """The callable `module:attr` names; a UserFunctionError saying why when it cannot be had."""
    module_name, _, attr = entrypoint.partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except Exception as err:  # ImportError, AttributeError, or whatever the module raises on import
        raise UserFunctionError(f"cannot load {entrypoint}: {one_line(err)}") from err
    if not callable(target):
        raise UserFunctionError(f"cannot load {entrypoint}: {type(target).__name__} is not callable")
    return target  # type: ignore[no-any-return]


def user_config(config: TrainConfig, own: Mapping[str, Any]) -> dict[str, Any]:
    """What the function receives: the trial's fields (method fields flat, as axes name them; `seed`,
    `epochs`, `learning_rate`, ...) and the values of its own axes."""
    values = {k: v for k, v in asdict(config).items() if k != "method_params"}
    return values | dict(config.method_params) | dict(own)


class Reporter:
    """Handed to the function: `report` once per epoch. `metric` (maximised, or minimised: its negation is
    the trial's `score`) must be among the reported values; `epoch`, `score` and `best_score` are added.
    `checkpoint`: the folder a restarted trial resumes from (None on a first start)."""

    def __init__(
        self,
        metric: str,
        mode: str,
        send: Send,
        log: Log,
        checkpoint: Path | None = None,
    ) -> None:
        self.metric, self.mode, self._send, self._log = metric, mode, send, log
        self.checkpoint = checkpoint
        progress = _read_progress(checkpoint)
        self.epoch: int = int(progress.get("epoch", 0))
        self.best: float | None = progress.get("best_score")
        self.names: set[str] = set()  # every metric name reported so far (what an audit compares)

    def report(self, metrics: Mapping[str, float], checkpoint_dir: str | Path | None = None) -> None:
        values = {str(k): metric_number(k, v) for k, v in metrics.items()}
        if self.metric not in values:
            raise ReportRefused(f"reported metrics {sorted(values)} lack the sweep's metric {self.metric!r}")
        score = values[self.metric] if self.mode == "max" else -values[self.metric]
        self.epoch += 1
        if self.best is None or (math.isfinite(score) and not score <= self.best):
            self.best = score
        self.names |= set(values)
        out = values | {"epoch": float(self.epoch), "score": score, "best_score": self.best}
        folder = Path(checkpoint_dir) if checkpoint_dir is not None else None
        if folder is not None:
            if not folder.is_dir():
                raise ReportRefused(f"checkpoint_dir {folder} is not a folder")
            (folder / PROGRESS_FILE).write_text(json.dumps({"epoch": self.epoch, "best_score": self.best}))
        self._log(out, self.epoch)  # the run's metrics first: a kill in between re-logs the same values
        self._send(out, folder)


def metric_number(name: object, value: object) -> float:
    """A reported value as a float; a ValueError naming the metric when it is not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ReportRefused(f"metric {name!r}: {value!r} is not a number")
    return float(value)


def _read_progress(folder: Path | None) -> dict[str, Any]:
    if folder is None or not (folder / PROGRESS_FILE).is_file():
        return {}
    return dict(json.loads((folder / PROGRESS_FILE).read_text()))


def call_function(
    fn: UserFunction, config: dict[str, Any], reporter: EpochReporter, roots: list[Path]
) -> None:
    """Runs the function; what it raises becomes a UserFunctionError (class `user`), but for the trial's own
    failures to store a checkpoint (StorageError) and Tune's stop of a trial (SystemExit: BaseException)."""
    try:
        fn(config, reporter, roots)
    except StorageError:
        raise
    except Exception as err:
        raise UserFunctionError(one_line(err)) from err
