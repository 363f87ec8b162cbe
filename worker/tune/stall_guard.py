"""Driver-side Tune callback that fails a trial whose process stopped making progress.

Tune notices a trial's process only when it dies or reports. A process that hangs (a deadlock in a
native library, a collective that waits forever, an allocation refused inside one of Ray's own threads)
does neither, and the sweep then waits forever while the trial holds its GPUs. Each time the Tune loop
steps (about every 0.1 s), this guard measures how long each RUNNING trial has gone without a report
(its start counts as one) and, past the trial's stall limit, tags its MLflow run with error class
`stalled` and its reason, then kills its Ray actor. Tune sees the actor die and treats it as any failure:
retried from the last checkpoint while `limits.max_retries` allows, else ERROR; the sweep goes on.

The limit, in seconds:
- `limits.stall_timeout_s` when the spec sets it, from the trial's start (model loading and the first
  epoch included);
- else, once the trial has reported an epoch, `STALL_FACTOR` times the longest gap between its reports
  so far, and never under `STALL_FLOOR_S`; before its first report, `FIRST_REPORT_S` (6 hours: nothing
  tells how long a first epoch should take, but a hang that holds a GPU forever is worse than a first
  epoch this long that must set the limit).

The callback holds plain data (Tune pickles it into the experiment state); the times it measures are
per driver process and are not pickled: a restored sweep starts measuring again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.tune import Callback
from ray.tune.experiment import Trial

from worker.contract.tags import ERROR_CLASS, ERROR_MESSAGE
from worker.tune.tracking import TrackingTarget, set_tags, trial_run

logger = logging.getLogger(__name__)

STALL_FACTOR = 10.0  # a gap this many times the longest one seen is no slow epoch: the process hangs
STALL_FLOOR_S = 1800.0  # the adaptive limit never goes under 30 minutes
FIRST_REPORT_S = 6 * 3600.0  # without a set limit: the longest wait for a trial's first report


@dataclass
class Pace:
    """When a trial last reported, on the driver's monotonic clock (s), and its longest gap so far (s)."""

    last: float
    longest_gap: float = 0.0
    reports: int = 0

    def report(self, now: float) -> None:
        self.longest_gap = max(self.longest_gap, now - self.last)
        self.last = now
        self.reports += 1


def stall_limit(pace: Pace, stall_timeout_s: float | None) -> float:
    """The seconds without a report after which the trial counts as hung."""
    if stall_timeout_s is not None:
        return stall_timeout_s
    if pace.reports == 0:
        return FIRST_REPORT_S
    return max(STALL_FLOOR_S, STALL_FACTOR * pace.longest_gap)


@dataclass
class StallGuard(Callback):
    target: TrackingTarget
    stall_timeout_s: float | None = None
    clock: Callable[[], float] = time.monotonic
    paces: dict[str, Pace] = field(default_factory=dict)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "paces": {}}  # driver-local times mean nothing to a restored sweep

    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self.paces[trial.trial_id] = Pace(last=self.clock())  # also after a retry restarts the actor

    def on_trial_result(
        self, iteration: int, trials: list[Trial], trial: Trial, result: dict[str, Any], **info: Any
    ) -> None:
        if (pace := self.paces.get(trial.trial_id)) is not None:
            pace.report(self.clock())

    def on_step_begin(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        now = self.clock()
        for trial in trials:
            pace = self.paces.get(trial.trial_id)
            if pace is None or trial.status != Trial.RUNNING:
                continue
            limit = stall_limit(pace, self.stall_timeout_s)
            if now - pace.last > limit:
                self._fail(trial, now - pace.last, limit)

    def _fail(self, trial: Trial, silent_s: float, limit_s: float) -> None:
        del self.paces[trial.trial_id]  # one kill per start; Tune reports the actor's death
        message = (
            f"StalledTrial: no report for {silent_s:.0f} s (stall limit {limit_s:.0f} s); the driver killed"
            " its process (set limits.stall_timeout_s if its epochs really take this long)"
        )
        logger.warning("trial %s: %s", trial.trial_id, message)
        try:
            client = self.target.client()
            run = trial_run(client, self.target, trial.trial_id)
            if run is not None:
                set_tags(client, run.info.run_id, {ERROR_CLASS: "stalled", ERROR_MESSAGE: message})
        except Exception:  # the run keeps the class Tune's error gives it (`infra`)
            logger.exception("could not tag the stalled trial %s", trial.trial_id)
        actor = trial.temporary_state.ray_actor
        if actor is not None:
            ray.kill(actor, no_restart=True)
