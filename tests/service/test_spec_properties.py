"""Property-based tests of the job spec over REST (hypothesis): a valid spec (tests/service/utils.py) made
invalid in one place, with a wrong type, a value out of range, an unknown key, a huge grid or a knob
nobody may sweep, is always refused with a 4xx, never a 5xx; a 422 names the field at fault in `field`.
Whole documents of arbitrary JSON get a 4xx too. Examples are few (the file runs in seconds)."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from service.http.ratelimit import RateLimiter
from smart_core.config import METHOD_PRESETS
from tests.service.utils import auth, spec
from worker.contract.spec import Axis, JobSpec, Limits, Resources, Search, SearchSpace
from worker.contract.tasks import TASKS

EXAMPLES = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,  # the same examples on every run: a CI failure reproduces
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

Path = tuple[str, ...]


@pytest.fixture
def api(client: TestClient, team_key: str) -> tuple[TestClient, str]:
    client.app.state.rate_limiter = RateLimiter(10_000.0, 10_000)  # type: ignore[attr-defined]
    return client, team_key


def _with(path: Path, value: Any) -> dict[str, Any]:
    """The valid spec with `value` at `path` (dicts on the way are created)."""
    doc = spec()
    node = doc
    for name in path[:-1]:
        node = node.setdefault(name, {})
    node[path[-1]] = value
    return doc


def _refused(api: tuple[TestClient, str], body: Any, blame: Path | None) -> None:
    """`body` gets a 4xx; a 422 names `blame` (or a field inside it, or the object holding it)."""
    client, key = api
    response = client.post("/api/v1/jobs", json=body, headers=auth(key))
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:300])
    assert response.status_code != 429, response.text
    assert response.headers["content-type"] == "application/json"
    answer = response.json()
    assert isinstance(answer["detail"], str) and answer["detail"]
    if response.status_code != 422 or blame is None:
        return
    field, path = answer["field"], ".".join(blame)
    assert field, f"a 422 without a field for {path}: {answer['detail']}"
    assert field == path or field.startswith(path + ".") or path.startswith(field + "."), (path, answer)
    assert answer["errors"] and answer["errors"][0]["field"] == field


# wrong types: the spec is validated strictly, so a numeric string or a boolean is no number either
NOT_NUMBER = st.one_of(
    st.text(max_size=6),
    st.integers().map(str),
    st.booleans(),
    st.lists(st.integers(), min_size=1, max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), min_size=1, max_size=2),
)
NOT_STRING = st.one_of(
    st.integers(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.integers(), max_size=2),
)
NUMBERS: dict[Path, st.SearchStrategy[Any]] = {
    ("training", "epochs"): st.one_of(st.integers(max_value=0), st.integers(min_value=101)),
    ("training", "batch_size"): st.one_of(st.integers(max_value=0), st.integers(min_value=4097)),
    ("training", "max_seq_length"): st.one_of(st.integers(max_value=7), st.integers(min_value=8193)),
    ("training", "max_train_samples"): st.integers(max_value=0),
    ("training", "warmup_fraction"): st.one_of(st.floats(max_value=-1e-9), st.floats(min_value=1.0)),
    ("resources", "cpus"): st.one_of(st.floats(max_value=0.0), st.floats(min_value=8.5, max_value=1e300)),
    ("resources", "gpus"): st.one_of(st.floats(max_value=-1e-9), st.floats(min_value=1.5, max_value=1e9)),
    ("priority",): st.one_of(st.integers(max_value=-101), st.integers(min_value=1)),
    ("limits", "max_concurrent_trials"): st.one_of(st.integers(max_value=0), st.integers(min_value=1025)),
    ("limits", "time_budget_s"): st.one_of(st.floats(max_value=0.0), st.floats(min_value=259_201)),
    ("search", "num_samples"): st.one_of(st.integers(max_value=0), st.integers(min_value=1001)),
    ("train_fraction",): st.one_of(st.floats(max_value=0.0), st.floats(min_value=1.0 + 1e-9)),
}
FINITE = {p: s.filter(lambda v: not isinstance(v, float) or math.isfinite(v)) for p, s in NUMBERS.items()}


@EXAMPLES
@given(data=st.data())
def test_a_number_of_the_wrong_type_is_a_422_naming_it(api: tuple[TestClient, str], data: Any) -> None:
    path = data.draw(st.sampled_from(sorted(NUMBERS)))
    _refused(api, _with(path, data.draw(NOT_NUMBER)), path)


@EXAMPLES
@given(data=st.data())
def test_a_number_out_of_range_is_a_422_naming_it(api: tuple[TestClient, str], data: Any) -> None:
    path = data.draw(st.sampled_from(sorted(FINITE)))
    _refused(api, _with(path, data.draw(FINITE[path])), path)


@EXAMPLES
@given(
    path=st.sampled_from([("name",), ("task",), ("model",), ("method",), ("data",)]),
    value=NOT_STRING,
)
def test_a_string_of_the_wrong_type_is_a_422_naming_it(
    api: tuple[TestClient, str], path: Path, value: Any
) -> None:
    _refused(api, _with(path, value), path)


@EXAMPLES
@given(
    path=st.sampled_from([("task",), ("method",), ("model",)]),
    value=st.text(min_size=1, max_size=30),
)
def test_an_unknown_name_is_a_422_naming_it(api: tuple[TestClient, str], path: Path, value: Any) -> None:
    if path == ("task",) and value.lower() in TASKS or path == ("method",) and value in METHOD_PRESETS:
        return
    if path == ("model",) and value.strip() == spec()["model"]:
        return
    _refused(api, _with(path, value), path)


BLOCKS: dict[Path, type[BaseModel] | None] = {
    (): JobSpec,
    ("training",): None,  # derived from worker.contract.trial: its fields below
    ("resources",): Resources,
    ("limits",): Limits,
    ("search",): Search,
    ("search_space",): SearchSpace,
    ("search_space", "axes", "learning_rate"): Axis,
}


def _known(block: Path) -> set[str]:
    model = BLOCKS[block] or JobSpec.model_fields["training"].annotation
    assert model is not None and issubclass(model, BaseModel)
    return set(model.model_fields)


@EXAMPLES
@given(
    block=st.sampled_from(sorted(BLOCKS)),
    key=st.text(min_size=1, max_size=12),
    value=st.one_of(st.integers(), st.text(max_size=5), st.none()),
)
def test_an_unknown_key_is_a_422_naming_it(
    api: tuple[TestClient, str], block: Path, key: str, value: Any
) -> None:
    if key in _known(block):
        return
    _refused(api, _with((*block, key), value), (*block, key))


@EXAMPLES
@given(
    axis=st.sampled_from(["epochs", "batch_size", "max_seq_length", "warmup_fraction", "max_train_samples"]),
    bad=st.data(),
)
def test_an_axis_value_out_of_the_trial_bounds_is_a_422_naming_the_axis(
    api: tuple[TestClient, str], axis: str, bad: Any
) -> None:
    value = bad.draw(FINITE[("training", axis)])
    body = _with(("search_space", "axes", axis), {"type": "grid", "values": [value]})
    _refused(api, body, ("search_space", "axes", axis))


@EXAMPLES
@given(
    axis=st.sampled_from(["adv_lr", "epsilon", "eta", "lambda_s", "sigma", "mu"]),
    value=st.floats(max_value=-1e-6, allow_infinity=False),
)
def test_a_method_axis_value_out_of_bounds_is_a_422_naming_the_axis(
    api: tuple[TestClient, str], axis: str, value: float
) -> None:
    body = _with(("search_space", "axes", axis), {"values": [value]})
    body["method"] = "smart"  # every one of these parameters is SMART's (another method drops them)
    _refused(api, body, ("search_space", "axes", axis))


@pytest.mark.parametrize("value", ["abc", [1], {"a": 1}])
def test_an_axis_value_of_the_wrong_type_is_a_422_naming_the_axis(
    api: tuple[TestClient, str], value: Any
) -> None:
    body = _with(("search_space", "axes", "epochs"), {"values": [value]})
    _refused(api, body, ("search_space", "axes", "epochs"))


@EXAMPLES
@given(
    axis=st.sampled_from(["num_threads", "pad_to", "compile", "cpus", "data", "model", "resources"]),
    values=st.lists(st.integers(1, 512), min_size=1, max_size=3),
)
def test_what_a_tenant_may_not_sweep_is_a_422_naming_the_axes(
    api: tuple[TestClient, str], axis: str, values: list[int]
) -> None:
    _refused(api, _with(("search_space", "axes", axis), {"values": values}), ("search_space", "axes"))


@EXAMPLES
@given(
    sizes=st.lists(st.integers(2, 40), min_size=1, max_size=4).filter(lambda s: math.prod(s) > 256),
    seeds=st.integers(1, 5),
)
def test_a_huge_grid_is_refused_before_it_is_expanded(
    api: tuple[TestClient, str], sizes: list[int], seeds: int
) -> None:
    names = ["learning_rate", "weight_decay", "warmup_fraction", "max_grad_norm"]
    axes = {
        name: {"type": "grid", "values": [round(0.001 * (i + 1), 6) for i in range(n)]}
        for name, n in zip(names, sizes, strict=False)
    }
    body = _with(("search_space",), {"axes": axes})
    body["seeds"] = list(range(1, seeds + 1))
    _refused(api, body, ("search_space",))


@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(n=st.integers(300, 40_000))
def test_a_huge_axis_is_a_4xx(api: tuple[TestClient, str], n: int) -> None:
    """A long axis: a 422 on the grid's size, or a 413 once the body passes the limit."""
    values = [1e-6 * (i + 1) for i in range(n)]
    _refused(api, _with(("search_space", "axes", "learning_rate"), {"values": values}), ("search_space",))


@EXAMPLES
@given(seeds=st.one_of(st.just([]), st.lists(st.integers(0, 10**6), min_size=6, max_size=100, unique=True)))
def test_too_many_or_no_seeds_is_a_422_naming_them(api: tuple[TestClient, str], seeds: list[int]) -> None:
    _refused(api, _with(("seeds",), seeds), ("seeds",))


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@EXAMPLES
@given(doc=JSON)
def test_any_json_document_is_a_4xx_or_a_job(api: tuple[TestClient, str], doc: Any) -> None:
    client, key = api
    response = client.post("/api/v1/jobs", json=doc, headers=auth(key))
    assert 400 <= response.status_code < 500, (doc, response.status_code, response.text[:300])


@EXAMPLES
@given(path=st.sampled_from(sorted(NUMBERS)), data=st.data())
def test_a_valid_spec_with_one_block_replaced_by_json_is_never_a_5xx(
    api: tuple[TestClient, str], path: Path, data: Any
) -> None:
    client, key = api
    body = copy.deepcopy(_with(path[:1], data.draw(JSON)))
    response = client.post("/api/v1/jobs", json=body, headers=auth(key))
    assert response.status_code < 500, (body, response.status_code, response.text[:300])
