"""When a new version takes the alias `best` of its registered model (`smartune-<team>-<task>`).

Every job of a team on a task adds one version; `best` must name the version with the best dev score, and a
dev score says something only next to another taken on the same dev rows. A version therefore records its
score and the digest of what picks its dev rows (`eval_rows_digest`); the rule:

- a version without a finite dev score never takes `best`;
- the first scored version takes it (no version holds it, or the one it names is gone);
- a version scored on other dev rows than the current best's (another `max_eval_samples`, data, columns,
  sampling; a best from before this rule, without a digest) is not compared: `best` stays, and the new
  version's note says why;
- otherwise the new version takes `best` only when its score is strictly higher (a tie keeps the older).

Every task's main metric is higher-is-better (accuracy, F1, Matthews, Pearson: worker.contract.tasks).
Pure: no MLflow here (worker.tune.registry reads and writes the versions).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

UNSET = "None"  # how a trial's params (worker.tune.tracking.flat_params) write an unset field


@dataclass(frozen=True)
class Scored:
    """A version as the rule sees it (read from its tags)."""

    version: str
    score: float | None  # the dev main metric at the trial's best epoch
    eval_rows: str | None  # eval_rows_digest; None for a version registered before the rule


def eval_rows_digest(params: Mapping[str, str], task: str, metric: str) -> str:
    """SHA-256 (hex) of what picks a trial's dev rows, from its run's params: equal exactly when two trials
    were scored by `metric` on the same rows of the same file. The fields are those that
    worker.training.prepared.eval_examples reads: the split's file (task, data, columns) and the sample of
    it (max_eval_samples; then sampling; then, for a random sample, fraction_seed). Fields that do not
    change the rows are left out (the sampling when every row is kept, the seed of a `head` sample)."""
    picked = {"task": task, "metric": metric}
    picked |= {name: params.get(name, UNSET) for name in ("data", "columns", "max_eval_samples")}
    if picked["max_eval_samples"] != UNSET:
        picked["sampling"] = params.get("sampling", "random")
        if picked["sampling"] == "random":
            picked["fraction_seed"] = params.get("fraction_seed", UNSET)
    return hashlib.sha256(json.dumps(picked, sort_keys=True).encode()).hexdigest()


def _finite(score: float | None) -> bool:
    return score is not None and math.isfinite(score)


def decide(new: Scored, current: Scored | None, metric: str) -> tuple[bool, str]:
    """(whether `new` takes `best`, the note saying why) with `current` the version `best` names now."""
    if not _finite(new.score):
        return False, "no finite dev score: not a candidate for best"
    assert new.score is not None
    if current is None:
        return True, f"took best: the first scored version (dev {metric} {new.score:.4f})"
    if current.version == new.version:
        return True, f"best already (dev {metric} {new.score:.4f})"
    if current.eval_rows is None or not _finite(current.score):
        return False, (
            f"not compared: version {current.version} (best) records no dev set digest or score; best stays"
        )
    assert current.score is not None
    if current.eval_rows != new.eval_rows:
        return False, (
            f"not comparable: scored on other dev rows than version {current.version} (best), eval rows "
            f"{new.eval_rows[:12] if new.eval_rows else '?'} vs {current.eval_rows[:12]}; best stays"
        )
    if new.score > current.score:
        return True, (
            f"took best from version {current.version}: dev {metric} {new.score:.4f} > {current.score:.4f}"
        )
    return False, (
        f"best stays at version {current.version}: dev {metric} {new.score:.4f} does not beat "
        f"{current.score:.4f}"
    )
