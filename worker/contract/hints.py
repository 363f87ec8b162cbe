""" "Did you mean" hints for a job spec's unknown fields: a name that is a field elsewhere in the spec
(`training.epsilon` -> `method_params.epsilon`), else a near-miss spelling (difflib) of a field, the
same block's first. The places come from the contract itself (JobSpec's models, the method's fields).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from functools import cache
from typing import Any, get_args

from pydantic import BaseModel

from worker.contract.grid import METHOD_FIELDS

CUTOFF = (
    0.75  # difflib's similarity for a near miss: `lamda_s` and `lambda_s` 0.93, `lr` and `learning_rate` 0.27
)


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The models an annotation holds directly (`Training`, `Multitask | None`); not a dict's values
    (`search_space.axes` is keyed by trial field names, not fields)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if getattr(annotation, "__origin__", None) is dict:
        return []
    return [model for arg in get_args(annotation) for model in _models(arg)]


@cache
def field_paths() -> tuple[str, ...]:
    """The dotted path of every field a job spec knows, `method_params.<name>` included."""
    from worker.contract.spec import JobSpec  # the spec imports this module: resolved at the first hint

    paths: list[str] = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, info in model.model_fields.items():
            paths.append(prefix + name)
            for inner in _models(info.annotation):
                walk(inner, f"{prefix}{name}.")

    walk(JobSpec, "")
    paths += [f"method_params.{name}" for name in sorted(METHOD_FIELDS)]
    return tuple(paths)


def _leaf(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def _parent(path: str) -> str:
    return path.rsplit(".", 1)[0] if "." in path else ""


def suggest(loc: Sequence[str | int]) -> str | None:
    """The field meant by the unknown field at `loc` (("training", "epsilon")), as a dotted path, or None."""
    name, parent = str(loc[-1]), ".".join(str(part) for part in loc[:-1])
    paths = field_paths()
    elsewhere = [p for p in paths if _leaf(p) == name and _parent(p) != parent]
    if elsewhere:
        return elsewhere[0]
    siblings = {_leaf(p): p for p in paths if _parent(p) == parent}
    close = difflib.get_close_matches(name, list(siblings), n=1, cutoff=CUTOFF)
    if close:
        return siblings[close[0]]
    anywhere = difflib.get_close_matches(name, list(paths_by_leaf()), n=1, cutoff=CUTOFF)
    return paths_by_leaf()[anywhere[0]] if anywhere else None


@cache
def paths_by_leaf() -> dict[str, str]:
    """Leaf name -> the first path with it (top level and blocks before `method_params`)."""
    out: dict[str, str] = {}
    for path in field_paths():
        out.setdefault(_leaf(path), path)
    return out


def did_you_mean(loc: Sequence[str | int]) -> str:
    """`; did you mean `method_params.epsilon`?` to append to the unknown field's message, or ``."""
    meant = suggest(loc)
    return f"; did you mean `{meant}`?" if meant else ""
