"""A custom-function job (issue 33): each trial runs a user's function instead of the built-in training loop.

`function: {entrypoint: "pkg.module:fn", metric: accuracy, mode: max}` in a job spec. The function is
importable on the workers (the spec names it, the service cannot import it: only the format is checked at
submission; the sweep driver imports it before it asks Ray for anything). Its search axes may name keys of
its own (free axes: any identifier that is not a trial field), which reach it in its `config` beside the
trial's fields. Pydantic only: the control plane validates with it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from worker.contract.search import Axis, StrictModel

# Key of a Tune trial config holding a function trial's free-axis values ({name: value}); absent otherwise.
FUNCTION_KEY = "function"
# `module.path:attribute`: dotted identifiers, one colon, one attribute (no call, no nesting).
ENTRYPOINT = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


class FunctionSpec(StrictModel):
    """What each trial runs, and what its sweep optimises."""

    entrypoint: str = Field(
        pattern=f"^{ENTRYPOINT.pattern}$",  # the whole value (a JSON Schema pattern is a search)
        max_length=300,
        description="`module:function`, importable on the workers; called as fn(config, reporter, data_roots)",
        examples=["examples.custom_function.linear_probe:train"],
    )
    metric: str | None = Field(
        None,
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z_][\w./-]*$",
        description="the reported metric the sweep optimises; default: the task's main metric",
    )
    mode: Literal["max", "min"] = Field("max", description="maximise or minimise `metric`")
    max_minutes: float | None = Field(
        None,
        gt=0,
        le=7 * 24 * 60,
        description="what one trial may take, in minutes: the cost estimate's figure",
    )


def free_axis_names(axes: Mapping[str, Axis], known: frozenset[str]) -> list[str]:
    """The axes that name none of the trial's fields (`known`): the function's own keys, sorted."""
    return sorted(set(axes) - known)


def free_grid(axes: Mapping[str, Axis], algorithm: str) -> list[dict[str, Any]]:
    """The combinations of the free axes that are walked as a grid (grid axes; choice axes under the grid
    algorithm, as for trial fields): one dict per combination, [{}] when there is none."""
    walked = {
        name: list(axis.values or [])
        for name, axis in sorted(axes.items())
        if axis.type == "grid" or (axis.type == "choice" and algorithm == "grid")
    }
    return [dict(zip(walked, combo, strict=True)) for combo in itertools.product(*walked.values())]


def free_sampled(axes: Mapping[str, Axis], algorithm: str) -> dict[str, Axis]:
    """The free axes Tune samples (random choice, uniform, loguniform)."""
    grid = free_grid(axes, algorithm)[0]
    return {name: axis for name, axis in sorted(axes.items()) if name not in grid}


# Key of a Tune trial config holding the values Tune sampled for a function's own random axes.
SAMPLED_KEY = "function_sampled"


def own_values(config: Mapping[str, Any]) -> dict[str, Any]:
    """A Tune trial config's values of the function's own axes, grid and sampled ({} for other jobs)."""
    return {**dict(config.get(FUNCTION_KEY) or {}), **dict(config.get(SAMPLED_KEY) or {})}
