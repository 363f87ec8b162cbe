"""The job spec's JSON Schema types `method_params` per method from MethodConfig's declarations, agrees with
the contract's own check parameter by parameter, and docs/spec.md is what the generator writes."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator
from pydantic import ValidationError

from smart_core.config import METHOD_PRESETS, MethodConfig
from worker.contract.method_schema import params_schema
from worker.contract.spec import JobSpec
from worker.contract.spec_doc import jobspec_schema, render_markdown

ROOT = Path(__file__).resolve().parents[3]
VALIDATOR = Draft202012Validator(jobspec_schema())
PARAMS = [f.name for f in fields(MethodConfig) if f.name != "method"]


def _spec(method: str | None, params: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"task": "rte", "model": "tiny-random", "method_params": params}
    return spec if method is None else {**spec, "method": method}


def _schema_accepts(doc: dict[str, Any]) -> bool:
    return VALIDATOR.is_valid(doc)


def _contract_accepts(doc: dict[str, Any]) -> bool:
    try:
        JobSpec.model_validate(doc, strict=True)
    except ValidationError:
        return False
    return True


def test_docs_spec_md_is_generated_from_the_contract() -> None:
    written = (ROOT / "docs" / "spec.md").read_text()
    assert written == render_markdown(), "stale: python -m worker.contract.spec_doc > docs/spec.md"


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    Draft202012Validator.check_schema(jobspec_schema())


@pytest.mark.parametrize("method", sorted(METHOD_PRESETS))
def test_every_parameter_has_a_type_and_a_description_per_method(method: str) -> None:
    properties = params_schema(method)["properties"]
    assert list(properties) == PARAMS and params_schema(method)["additionalProperties"] is False
    for name, schema in properties.items():
        assert ("type" in schema or "enum" in schema) and schema["description"], (method, name)
        assert "default" in schema


def test_ranges_and_defaults_come_from_the_declarations() -> None:
    smart, vanilla = params_schema("smart")["properties"], params_schema("vanilla")["properties"]
    assert smart["beta_late"]["minimum"] == 0 and smart["beta_late"]["maximum"] == 1
    assert smart["inner_updates"] == {**smart["inner_updates"], "type": "integer", "minimum": 1}
    assert smart["lambda_s"]["default"] == 1.0 and vanilla["lambda_s"]["const"] == 0.0
    assert params_schema("freelb")["properties"]["adv_steps"]["default"] == 3  # the preset's default
    assert "no effect with `vanilla`" in vanilla["epsilon"]["description"]
    assert "ignored" in params_schema("smart-breg-only")["properties"]["lambda_s"]["description"]
    assert set(params_schema("smart")["properties"]["teacher_dropout"]["enum"]) >= {"off", True, False}


def test_the_openapi_component_is_the_same_schema() -> None:
    schema = JobSpec.model_json_schema(ref_template="#/components/schemas/{model}", mode="validation")
    assert schema["allOf"] == jobspec_schema()["allOf"]


CASES = [
    (None, {"epsilon": 1e-4}),
    ("smart", {"lambda_s": 3, "projection": "renorm"}),
    ("smart", {"lambda_s": "lots"}),
    ("smart", {"projection": "sphere"}),
    ("smart", {"beta_late": 1.5}),
    ("smart", {"inner_updates": 0}),
    ("smart", {"ascent_steps": 1.5}),
    ("smart", {"teacher_dropout": True}),
    ("smart", {"epochs": 3}),
    ("smart", {"method": "vanilla"}),
    ("vanilla", {"lambda_s": 0}),
    ("vanilla", {"lambda_s": 1.0}),
    ("vanilla", {"mu": 0.5}),
    ("freelb", {"adv_lr": 0.05, "adv_steps": 2}),
    ("pgd", {"lambda_s": 0.1}),
    ("r3f", {"ascent_steps": 1}),
    ("r3f", {"noise": "normal", "sigma": 1e-4}),
    ("smart-breg-only", {"lambda_s": 2.0}),  # accepted, and ignored (the preset pins it)
    ("smart", {"adv_norm": "inf"}),
    ("smart", {"eta": -1}),
    ("smart", {"lambda_s": True}),
]


@pytest.mark.parametrize(("method", "params"), CASES)
def test_the_schema_accepts_what_the_contract_accepts(method: str | None, params: dict[str, Any]) -> None:
    doc = _spec(method, params)
    assert _schema_accepts(doc) == _contract_accepts(doc), (method, params)


@pytest.mark.parametrize("method", sorted(METHOD_PRESETS))
def test_each_default_is_accepted_by_both(method: str) -> None:
    for name, schema in params_schema(method)["properties"].items():
        doc = _spec(method, {name: schema["default"]})
        assert _schema_accepts(doc) and _contract_accepts(doc), (method, name)


def test_the_shipped_examples_are_valid_against_the_schema() -> None:
    examples = sorted((ROOT / "examples").glob("*.yaml"))
    assert examples
    for path in examples:
        doc = yaml.safe_load(path.read_text())
        errors = [e.message for e in VALIDATOR.iter_errors(doc)]
        assert not errors, (path.name, errors[:3])
