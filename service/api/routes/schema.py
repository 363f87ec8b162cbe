"""The job spec's JSON Schema (`GET /api/v1/schema/jobspec`), without a key: what a client or an editor
validates a spec file against before submitting it. The same schema as the OpenAPI document's `JobSpec`
(`method_params` typed per method; worker.contract.spec_doc), with its definitions under `$defs`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from worker.contract.spec_doc import jobspec_schema

router = APIRouter(prefix="/schema", tags=["schema"])


@router.get(
    "/jobspec",
    responses={
        200: {
            "description": "a JSON Schema (Draft 2020-12) of the job spec",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    },
)
async def read_jobspec_schema() -> dict[str, Any]:
    """The job spec's JSON Schema: every field with its type, range, default and description, and each
    method's `method_params`."""
    return jobspec_schema()
