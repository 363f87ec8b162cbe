"""Reading a job spec from YAML or JSON (a file, or inline text) into a validated `JobSpec`.

Every problem becomes one `SpecError` whose message names the field (`search_space.axes.lr: ...`) or,
for unparsable text, the line. No torch and no ray: the driver rejects a bad spec before starting Ray.
YAML is read with `worker.contract.yaml12` (numbers as YAML 1.2 reads them; the SDK reads spec files with
the same loader), so the canonical JSON that travels in `SMARTUNE_JOB_SPEC` (`5e-05`) and a file's
`lr: 1e-4` stay numbers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from worker.contract.spec import JobSpec
from worker.contract.yaml12 import yaml_loader


class SpecError(ValueError):
    """An invalid job spec; the message names the offending field."""


def _field(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc) or "spec"


def format_validation_error(error: ValidationError, limit: int = 5) -> str:
    """`field.path: message` per problem, the first `limit` of them, one per line."""
    lines = []
    for item in error.errors()[:limit]:
        message = str(item["msg"]).removeprefix("Value error, ")
        lines.append(f"{_field(tuple(item['loc']))}: {message}")
    more = len(error.errors()) - limit
    if more > 0:
        lines.append(f"... and {more} more problem(s)")
    return "\n".join(lines)


def spec_from_dict(document: Any, source: str = "spec") -> JobSpec:
    if not isinstance(document, dict):
        raise SpecError(f"{source}: a job spec is a mapping of fields, got {type(document).__name__}")
    try:
        return JobSpec.model_validate(document)
    except ValidationError as err:
        raise SpecError(f"invalid job spec ({source}):\n{format_validation_error(err)}") from None


def spec_from_text(text: str, source: str = "spec") -> JobSpec:
    """YAML or JSON text (JSON is YAML) -> JobSpec."""
    try:
        document = yaml.load(text, Loader=yaml_loader())  # a SafeLoader subclass
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise SpecError(f"{source}: not valid YAML/JSON{where}: {problem}") from None
    return spec_from_dict(document, source)


def spec_from_file(path: Path) -> JobSpec:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SpecError(f"cannot read spec file {path}: {err.strerror or err}") from None
    return spec_from_text(text, str(path))


def spec_to_json(spec: JobSpec) -> str:
    """The canonical JSON form: what travels in `SMARTUNE_JOB_SPEC` and what `spec_hash` hashes."""
    return spec.canonical_json()


def spec_document(spec: JobSpec) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(spec.canonical_json())
    return document
