"""The versioned API router: one router per resource, mounted under `/api/v1`."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.routes import audits, datasets, jobs, keys, models, pool, schema, teams, webhooks

api_router = APIRouter()
api_router.include_router(jobs.router)
api_router.include_router(audits.router)
api_router.include_router(pool.router)
api_router.include_router(teams.router)
api_router.include_router(keys.router)
api_router.include_router(datasets.router)
api_router.include_router(models.router)
api_router.include_router(webhooks.router)
api_router.include_router(schema.router)
