"""The job spec's reference, generated from the contract: its JSON Schema (`jobspec_schema`, served at
`GET /api/v1/schema/jobspec`) and docs/spec.md (`python -m worker.contract.spec_doc > docs/spec.md`;
tests/worker/contract/test_spec_doc.py fails when the file is stale). Pydantic only, like the contract.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from smart_core.config import METHOD_PRESETS
from worker.contract.method_schema import DEFAULT_METHOD, params_schema
from worker.contract.spec import JobSpec

DIALECT = "https://json-schema.org/draft/2020-12/schema"
# The blocks documented in their own section, in this order: (dotted path, JobSpec schema definition).
_BLOCKS = (("training", "Training"), ("search_space", "SearchSpace"), ("search_space.axes.<field>", "Axis"),
           ("search", "Search"), ("search.asha", "Asha"), ("resources", "Resources"), ("limits", "Limits"),
           ("multitask", "Multitask"), ("peft", "LoraSpec"), ("function", "FunctionSpec"))  # fmt: skip


@cache
def _schema() -> dict[str, Any]:
    return {"$schema": DIALECT, **JobSpec.model_json_schema(mode="validation")}


def jobspec_schema() -> dict[str, Any]:
    """JobSpec's JSON Schema (Draft 2020-12), `method_params` typed per method (worker.contract.method_schema)."""
    return _schema()


def _value(value: Any) -> str:
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def _type(schema: dict[str, Any]) -> str:
    """A field's type in a few words: `integer`, `"a" | "b"`, `string or null`, `list of integer`."""
    if "$ref" in schema:
        return f"object ({schema['$ref'].rsplit('/', 1)[-1]})"
    if "const" in schema:
        return _value(schema["const"])
    if "enum" in schema:
        return " | ".join(_value(v) for v in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_type(option) for option in schema["anyOf"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map of {_type(schema['additionalProperties'])}"
    return str(kind)


def _range(schema: dict[str, Any]) -> str:
    """`[0, 1]`, `> 0`, `<= 100`, `1..100 items`; the first option's for `X or null`."""
    options = [o for o in schema.get("anyOf", [schema]) if o.get("type") != "null"] or [schema]
    s = options[0]
    if "const" in s:
        return ""
    low = (f"> {s['exclusiveMinimum']:g}" if "exclusiveMinimum" in s
           else f">= {s['minimum']:g}" if "minimum" in s else None)  # fmt: skip
    high = (f"< {s['exclusiveMaximum']:g}" if "exclusiveMaximum" in s
            else f"<= {s['maximum']:g}" if "maximum" in s else None)  # fmt: skip
    if "minimum" in s and "maximum" in s:
        return f"[{s['minimum']:g}, {s['maximum']:g}]"
    size = [f"{k.removeprefix('min').removeprefix('max').lower()} {op} {s[k]}"
            for k, op in (("minItems", ">="), ("maxItems", "<="), ("minLength", ">="), ("maxLength", "<="))
            if k in s]  # fmt: skip
    return ", ".join([p for p in (low, high) if p] + size)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(properties: dict[str, Any], required: list[str]) -> list[str]:
    rows = ["| field | type | range | default | description |", "| --- | --- | --- | --- | --- |"]
    for name, schema in properties.items():
        default = "required" if name in required else _value(schema["default"]) if "default" in schema else ""
        rows.append(f"| `{name}` | {_cell(_type(schema))} | {_cell(_range(schema))} | {_cell(default)} | "
                    f"{_cell(schema.get('description', ''))} |")  # fmt: skip
    return rows


def render_markdown() -> str:
    """docs/spec.md: the top level, each block, then each method's `method_params`."""
    schema = jobspec_schema()
    defs = schema["$defs"]
    out = [
        "# The job spec: reference",
        "",
        "Generated from the contract (`worker/contract/`, `smart_core/config.py`) by",
        "`python -m worker.contract.spec_doc > docs/spec.md`; do not edit by hand. The same schema is served",
        "as JSON Schema (Draft 2020-12) at `GET /api/v1/schema/jobspec` (no key needed) and is the OpenAPI",
        "document's `JobSpec`. A spec file (YAML or JSON) holds one object with these fields; an unknown",
        "field is refused with a 422 naming it, with a hint when it belongs elsewhere (`training.epsilon`:",
        "did you mean `method_params.epsilon`?).",
        "",
        "## Top level",
        "",
        *_table(schema["properties"], schema.get("required", [])),
    ]
    for path, name in _BLOCKS:
        block = defs[name]
        out += ["", f"## `{path}`", "", *([block["description"], ""] if "description" in block else [])]
        out += _table(block["properties"], block.get("required", []))
    out += [
        "",
        "## `method_params`, by method",
        "",
        f"What `method_params` takes depends on `method` (default `{DEFAULT_METHOD}`): every method takes the",
        "same parameter names, with its own defaults; a parameter the method pins is either fixed (any other",
        "value is refused) or ignored, and one that cannot change what the method trains says so. Any other",
        "key is refused.",
    ]
    for method in sorted(METHOD_PRESETS):
        params = params_schema(method)
        out += ["", f"### `{method}`", "", *_table(params["properties"], [])]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render_markdown(), end="")  # noqa: T201
