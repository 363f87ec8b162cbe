"""The JSON Schema of a job spec's `method_params`, one per method, generated from the declarations of
smart_core.config.MethodConfig (each field's type, its `help` and its bounds [ge, le]) and the method
presets (METHOD_PRESETS), never copied by hand.

At run time `method_params` stays a plain mapping checked by `method_config` (the stored spec format is
unchanged); this module only describes, for each method, what that check accepts: each parameter's JSON
type, range, choices, the method's default and whether the method uses it. `JobSpec`'s document carries
the descriptions as a union discriminated by `method` (JSON Schema `if`/`then` on `method`'s value;
`with_method_params`), which is what `GET /api/v1/schema/jobspec`, the OpenAPI document and docs/spec.md
show. A preset field the method pins (`vanilla`'s λ_s = 0) is stated as the one value the check accepts
when it refuses any other, else as ignored: the check itself is asked, with a different value (`_fixed`).
"""

from __future__ import annotations

from dataclasses import fields
from functools import cache
from typing import Any, Literal, get_args, get_origin, get_type_hints

from smart_core.config import (
    FIELD_ALIASES,
    METHOD_PRESETS,
    TUNABLE_PRESET_FIELDS,
    MethodConfig,
    method_config,
)

_JSON_TYPES = {float: "number", int: "integer", bool: "boolean", str: "string"}
DEFAULT_METHOD = "smart"  # JobSpec.method's default: a spec without `method` is checked as this one


def _base(name: str, hint: Any, meta: dict[str, Any]) -> dict[str, Any]:
    """One parameter's schema from its declaration: type or choices, bounds, help."""
    schema: dict[str, Any]
    if get_origin(hint) is Literal:
        schema = {"enum": [*get_args(hint), *FIELD_ALIASES.get(name, ())]}
    else:
        schema = {"type": _JSON_TYPES[hint]}
    if meta["ge"] is not None:
        schema["minimum"] = meta["ge"]
    if meta["le"] is not None:
        schema["maximum"] = meta["le"]
    schema["description"] = meta["help"]
    return schema


@cache
def _declared() -> dict[str, tuple[Any, dict[str, Any]]]:
    """Parameter name -> (its resolved type, its metadata), in declaration order; `method` is no parameter."""
    hints = get_type_hints(MethodConfig)
    return {f.name: (hints[f.name], dict(f.metadata)) for f in fields(MethodConfig) if f.name != "method"}


def _other(value: Any, hint: Any) -> Any:
    """A value of the same type as `value`, different from it (to ask the check whether it is fixed)."""
    if get_origin(hint) is Literal:
        return next(choice for choice in get_args(hint) if choice != value)
    return value + 1


def _fixed(method: str, name: str, value: Any, hint: Any) -> bool:
    """Whether the method's check refuses any value of `name` but its preset's (FreeLB's λ_s = 0)."""
    try:
        method_config(method, **{name: _other(value, hint)})
    except ValueError:
        return True
    return False


def _unused(config: MethodConfig, role: str) -> bool:
    """Whether a parameter of this role cannot change what the method trains (worker.contract.grid's rule)."""
    if role in ("perturbation", "ascent"):
        return not config.uses_smoothness or (role == "ascent" and config.ascent_steps == 0)
    if role == "bregman":
        return not config.uses_bregman
    if role == "adversarial":
        return config.method not in ("freelb", "pgd")
    return role == "site" and not config.uses_smoothness and config.method not in ("freelb", "pgd")


@cache
def params_schema(method: str) -> dict[str, Any]:
    """The JSON Schema of `method_params` for `method` (a METHOD_PRESETS name): every parameter with its
    type, range, the method's default and help; no other key."""
    config = method_config(method)
    pinned = set(METHOD_PRESETS[method]) - {"method"} - TUNABLE_PRESET_FIELDS
    properties: dict[str, Any] = {}
    for name, (hint, meta) in _declared().items():
        schema = _base(name, hint, meta)
        value = getattr(config, name)
        schema["default"] = value
        if name in pinned and _fixed(method, name, value, hint):
            schema |= {"const": value, "description": f"{meta['help']} (fixed by `{method}`)"}
        elif name in pinned:
            schema["description"] = f"{meta['help']} (`{method}` sets it: a value given here is ignored)"
        elif _unused(config, meta["role"]):
            schema["description"] = f"{meta['help']} (no effect with `{method}`)"
        properties[name] = schema
    return {
        "title": f"method_params of {method}",
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }


def with_method_params(schema: dict[str, Any]) -> None:
    """Make JobSpec's JSON Schema say what `method_params` takes for each `method`: `method` as an enum,
    and one `if method is M then method_params is params_schema(M)` per method (no `method`: smart's)."""
    properties = schema["properties"]
    properties["method"]["enum"] = sorted(METHOD_PRESETS)
    properties["method_params"].pop("additionalProperties", None)
    properties["method_params"]["description"] = (
        "the method's parameters over its preset's values (typed per method: the schema's `allOf` gives "
        "each method's), e.g. {'lambda_s': 3, 'projection': 'renorm'}"
    )
    branches = []
    for method in sorted(METHOD_PRESETS):
        condition: dict[str, Any] = {"properties": {"method": {"const": method}}}
        if method != DEFAULT_METHOD:
            condition["required"] = ["method"]  # an absent `method` is the default's
        branches.append({"if": condition, "then": {"properties": {"method_params": params_schema(method)}}})
    schema["allOf"] = branches
