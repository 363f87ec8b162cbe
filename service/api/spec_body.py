"""Reading the body of `POST /api/v1/jobs` ourselves, so that no request can hold the event loop.

`JobSpec.model_validate` expands and checks the whole grid (about 0.3 ms per cell), so validating a spec
is real CPU work: FastAPI would do it on the event loop, where a few large grids a second freeze every
endpoint. Here the route reads the raw bytes and `read_spec` (run in a worker thread, a few at a time)
parses them and checks, in order, what is cheap:

1. the media type (415) and the JSON itself (400: empty, malformed, not UTF-8, nested past all reason);
2. every value: no NaN or infinite number, no lone surrogate or NUL in a string, no nesting deeper than
   `MAX_DEPTH` (422 naming the field: a database or the driver would choke on them later);
3. the grid's raw size, counted from the JSON (explicit grid axes and the preset's, times tasks, times
   seeds) against the deployment's `max_cells` x `CELL_FACTOR` (422 on `search_space`): equivalent cells
   are merged only by the expansion, so a grid may shrink, but never by more than this factor here;
4. then the contract's own validation, whose errors become the usual 422 naming the field (an unknown
   field's with the one it probably meant: "did you mean `method_params.epsilon`?"). The checks
   the contract runs on the whole spec (every grid cell must make a valid trial) report no field; the
   field is found here from where the document sets the value the message names (`locate`).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from service.errors import ApiError
from worker.contract.hints import did_you_mean
from worker.contract.presets import SEARCH_PRESETS
from worker.contract.spec import JobSpec

CELL_FACTOR = 4  # raw cells allowed per deployment cell: room for the cells the expansion merges
MAX_DEPTH = 32  # a job spec nests 4 levels; method params and axis values a few more
JSON_TYPES = ("application/json",)
_NAME = re.compile(r"[A-Za-z_]\w*")
_PLACES = (("search_space", "axes"), ("training",), ("method_params",))  # an axis first: it varies by cell


def _error(loc: tuple[str | int, ...], msg: str, kind: str) -> RequestValidationError:
    return RequestValidationError([{"loc": ("body", *loc), "msg": msg, "type": kind}])


def check_media_type(content_type: str | None) -> None:
    """JSON only (`application/json`, `application/*+json`); a missing header is taken as JSON."""
    if not content_type:
        return
    media = content_type.split(";", 1)[0].strip().lower()
    if media in JSON_TYPES or (media.startswith("application/") and media.endswith("+json")):
        return
    raise ApiError(415, f"the job spec must be sent as application/json, not {media or 'nothing'}")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(raw: bytes) -> Any:
    """The document, or a 400 saying why it is not JSON."""
    if not raw.strip():
        raise ApiError(400, "the request body is empty: send a job spec as JSON")
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except json.JSONDecodeError as err:
        raise ApiError(
            400, f"the body is not valid JSON: {err.msg} (line {err.lineno}, column {err.colno})"
        ) from None
    except UnicodeDecodeError:
        raise ApiError(400, "the body is not valid JSON: it is not UTF-8 text") from None
    except RecursionError:
        raise ApiError(400, "the body is not valid JSON: it nests too deeply") from None
    except ValueError as err:  # NaN / Infinity, an integer of more than 4300 digits
        raise ApiError(400, f"the body is not valid JSON: {err}") from None


def _bad_string(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate (invalid unicode)"
    return None


def check_values(doc: Any) -> None:
    """Walk the document (iteratively: no recursion limit to hit) for values nothing downstream takes."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), doc)]
    while stack:
        loc, value = stack.pop()
        if len(loc) > MAX_DEPTH:
            raise _error(loc[:MAX_DEPTH], f"nests deeper than {MAX_DEPTH} levels", "too_deep")
        if isinstance(value, float) and not math.isfinite(value):
            raise _error(loc, "number out of range: it must be finite", "finite_number")
        if isinstance(value, str) and (why := _bad_string(value)):
            raise _error(loc, f"the string {why}", "string_unicode")
        if isinstance(value, dict):
            for key, item in value.items():
                if why := _bad_string(key):
                    raise _error(loc, f"a key {why}", "string_unicode")
                stack.append(((*loc, key), item))
        elif isinstance(value, list):
            stack.extend(((*loc, i), item) for i, item in enumerate(value))


def _length(value: Any) -> int:
    return len(value) if isinstance(value, list) and value else 1


def raw_cells(doc: Any) -> int:
    """Grid cells x tasks x seeds as the raw document asks for them, counted as `JobSpec.grid_axes` does
    but before any validation: whatever is malformed counts 1 and is refused by the validation after."""
    if not isinstance(doc, dict):
        return 1
    space = doc.get("search_space")
    space = space if isinstance(space, dict) else {}
    search = doc.get("search")
    algorithm = search.get("algorithm", "grid") if isinstance(search, dict) else "grid"
    sizes: dict[str, int] = {}
    preset = space.get("preset")
    if isinstance(preset, str) and preset in SEARCH_PRESETS:
        sizes |= {name: len(values) for name, values in SEARCH_PRESETS[preset].axes.items()}
    axes = space.get("axes")
    for name, axis in axes.items() if isinstance(axes, dict) else []:
        kind = axis.get("type", "grid") if isinstance(axis, dict) else "grid"
        if kind == "grid" or (kind == "choice" and algorithm == "grid"):
            sizes[str(name)] = _length(axis.get("values") if isinstance(axis, dict) else None)
        else:
            sizes.pop(str(name), None)  # sampled by Tune: no cells
    return math.prod(sizes.values()) * _length(doc.get("task")) * _length(doc.get("seeds"))


def check_size(doc: Any, max_cells: int) -> None:
    cells, limit = raw_cells(doc), max_cells * CELL_FACTOR
    if cells > limit:
        raise ApiError(
            422,
            f"search_space: the grid asks for {cells} cells (axes x tasks x seeds) before merging equivalent "
            f"ones; the limit is {limit} ({max_cells} trials per job)",
            field="search_space",
        )


def _member(doc: Any, *path: str) -> Any:
    for name in path:
        doc = doc.get(name) if isinstance(doc, dict) else None
    return doc


def locate(msg: str, doc: Any) -> tuple[str, ...]:
    """The location of a whole-spec error (the contract's check of every grid cell): the first name in
    the message that the document sets as an axis, a training field or a method parameter; the search
    space for the grid's size; () when nothing in the document is to blame alone."""
    places = [(place, _member(doc, *place)) for place in _PLACES]
    for name in _NAME.findall(msg):
        for place, block in places:
            if isinstance(block, dict) and name in block:
                return (*place, name)
    if "the grid has" in msg:
        return ("search_space",)
    return ()


def read_spec(raw: bytes, content_type: str | None, *, max_cells: int) -> JobSpec:
    """The validated spec of a request body; every way it can be wrong is a 4xx naming what is wrong."""
    check_media_type(content_type)
    doc = parse_json(raw)
    check_values(doc)
    check_size(doc, max_cells)
    try:
        return JobSpec.model_validate(doc, strict=True)  # as the schema says: no "5" for 5, no 0 for false
    except ValidationError as err:
        errors = [
            {**e, "loc": ("body", *(e["loc"] or locate(str(e["msg"]), doc))), "msg": _hinted(e)}
            for e in err.errors(include_url=False, include_input=False)
        ]
        raise RequestValidationError(errors) from None


def _hinted(error: Any) -> str:
    """An unknown field's message with the field it probably meant (worker.contract.hints)."""
    msg = str(error["msg"])
    if error["type"] == "extra_forbidden" and error["loc"]:
        msg += did_you_mean(error["loc"])
    return msg
