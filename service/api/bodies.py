"""The request bodies of the admin routes, validated strictly: a JSON body must hold the types the OpenAPI
document declares (`"2"` is no number, `1` no boolean), as the job spec does (service.api.spec_body).

Lax validation would take `{"weight": "2", "is_admin": 1}`, which the document says is invalid: the
schema and the service would disagree on what a valid request is. These are the models of
service.schemas, unchanged but for `strict`, under the same names (the only ones the document shows).
"""

from __future__ import annotations

from pydantic import ConfigDict

from service import schemas


class TeamUpdate(schemas.TeamUpdate):
    model_config = ConfigDict(strict=True)


class TeamCreate(schemas.TeamCreate):
    model_config = ConfigDict(strict=True)


class ApiKeyCreate(schemas.ApiKeyCreate):
    model_config = ConfigDict(strict=True)
