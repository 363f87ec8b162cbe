"""The live table of a sweep's trials (state, epoch, score) for a terminal or a job log.

On a terminal the table is redrawn in place at most once a second; anywhere else (a Ray job's log) each
event is one line. It writes to stderr, so stdout carries only the summary JSON. Nothing here changes
what the sweep does.
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import Any, TextIO

from ray.tune import Callback
from ray.tune.experiment import Trial

from worker.tune.tuning import TrialResolver, trial_state

_COLUMNS = ("trial", "cell", "seed", "state", "epoch", "score", "best")


def _number(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, int | float) else "-"


class LiveTable(Callback):
    def __init__(self, resolver: TrialResolver, stream: TextIO | None = None, interval_s: float = 1.0):
        self.resolver = resolver
        self.stream = stream
        self.interval_s = interval_s
        self._drawn_lines = 0
        self._last_draw = 0.0

    def __getstate__(self) -> dict[str, Any]:  # Tune pickles callbacks; a stream cannot travel
        return {"resolver": self.resolver, "interval_s": self.interval_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["resolver"], None, state["interval_s"])  # type: ignore[misc]

    @property
    def out(self) -> TextIO:
        return self.stream or sys.stderr

    @property
    def live(self) -> bool:
        return bool(getattr(self.out, "isatty", lambda: False)())

    def row(
        self, trial: Trial, status: str | None = None, result: dict[str, Any] | None = None
    ) -> tuple[str, ...]:
        result = result or trial.last_result or {}
        resolved = self.resolver(trial.trial_id, trial.config)
        planned = resolved.planned_epochs
        done = int(result.get("epoch", 0) or 0)
        return (
            trial.trial_id,
            resolved.label or "-",
            str(resolved.seed),
            trial_state(status or trial.status, done, planned),
            f"{done}/{planned}",
            _number(result.get("score")),
            _number(result.get("best_score")),
        )

    def render(self, trials: list[Trial]) -> list[str]:
        rows = [_COLUMNS, *(self.row(t) for t in trials)]
        widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
        width = shutil.get_terminal_size((120, 20)).columns
        lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()[:width] for r in rows]
        counts: dict[str, int] = {}
        for r in rows[1:]:
            counts[r[3]] = counts.get(r[3], 0) + 1
        lines.append(", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
        return lines

    def _draw(self, trials: list[Trial], force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_draw < self.interval_s:
            return
        self._last_draw = now
        lines = self.render(trials)
        up = f"\x1b[{self._drawn_lines}F\x1b[J" if self._drawn_lines else ""  # back to the table's top
        self.out.write(up + "\n".join(lines) + "\n")
        self.out.flush()
        self._drawn_lines = len(lines)

    def _event(
        self, trial: Trial, what: str, status: str | None = None, result: dict[str, Any] | None = None
    ) -> None:
        if self.live:
            return
        trial_id, cell, seed, state, epoch, score, best = self.row(trial, status, result)
        self.out.write(f"[sweep] trial {trial_id} ({cell}, seed {seed}): {what} {state} epoch {epoch} "
                       f"score {score} best {best}\n")  # fmt: skip
        self.out.flush()

    def on_step_end(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        if self.live:
            self._draw(trials)

    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self._event(trial, "started;", Trial.RUNNING)  # Tune sets the status just after this call

    def on_trial_result(
        self, iteration: int, trials: list[Trial], trial: Trial, result: dict[str, Any], **info: Any
    ) -> None:
        self._event(trial, "epoch done;", result=result)

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self._event(trial, "ended;", Trial.TERMINATED)  # Tune marks it TERMINATED just after

    def on_trial_recover(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self._event(trial, "failed, will retry from its last checkpoint;")

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self._event(trial, "failed;")

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        if self.live:
            self._draw(trials, force=True)
        else:
            self.out.write("[sweep] " + self.render(trials)[-1] + "\n")
            self.out.flush()
