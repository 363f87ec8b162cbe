"""The OpenAPI document, made to tell the truth about what the service sends and takes.

FastAPI writes most of it from the routes; three things are fixed here, once, when it is first asked for:

- models that no route signature names are added to the components (the job spec: `POST /api/v1/jobs`
  reads its body itself, see service.api.spec_body, and points at `#/components/schemas/JobSpec`);
- every error answer is JSON, whatever the route's own media type (FastAPI would declare a plain-text
  route's errors as text/plain);
- FastAPI's default 422 schema (`HTTPValidationError`, a list under `detail`) is never what the service
  sends: routes that can answer 422 declare `ValidationErrorBody` (service.api.responses); FastAPI's own
  422, which it adds to any route with a parameter (a plain path segment cannot fail validation), is
  dropped where the route did not declare one, and so are its unused schemas.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

REF = "#/components/schemas/"
_FASTAPI_DEFAULTS = ("HTTPValidationError", "ValidationError")


def _add_models(doc: dict[str, Any], models: Sequence[type[BaseModel]]) -> None:
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for model in models:
        schema = model.model_json_schema(ref_template=REF + "{model}", mode="validation")
        for name, definition in {**schema.pop("$defs", {}), model.__name__: schema}.items():
            if name in schemas and schemas[name] != definition:
                raise RuntimeError(f"two different schemas named {name!r} in the OpenAPI document")
            schemas[name] = definition


def _operations(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [op for path in doc.get("paths", {}).values() for op in path.values() if isinstance(op, dict)]


def _json_errors(doc: dict[str, Any]) -> None:
    for operation in _operations(doc):
        for status, response in operation.get("responses", {}).items():
            content = response.get("content")
            if status[:1] in "45" and content:
                schema = next(iter(content.values())).get("schema", {})
                response["content"] = {"application/json": {"schema": schema}}


def _drop_undeclared_422(doc: dict[str, Any]) -> None:
    for operation in _operations(doc):
        responses = operation.get("responses", {})
        if f"{REF}HTTPValidationError'" in repr(responses.get("422", {})):
            del responses["422"]


def _drop_unused_defaults(doc: dict[str, Any]) -> None:
    """Drop FastAPI's 422 schemas unless a route still points at them (then they stay, and a test fails)."""
    if f"{REF}HTTPValidationError'" not in repr(doc.get("paths", {})):
        for name in _FASTAPI_DEFAULTS:
            doc.get("components", {}).get("schemas", {}).pop(name, None)


def install(app: FastAPI, models: Sequence[type[BaseModel]]) -> None:
    """Replace `app.openapi` by FastAPI's document with the fixes above (built once, then cached)."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = generate()  # FastAPI caches this very dict: the fixes below land in its cache
            _add_models(doc, models)
            _json_errors(doc)
            _drop_undeclared_422(doc)
            _drop_unused_defaults(doc)
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]
