"""The store room: the database that is the control plane's source of truth (docs/architecture.md §2).

`db` (engine, sessions, migrations on start), `models` (the tables), `crud` (plain functions on a
session), `dashboard_sessions` (the dashboard's signed-in viewers), `webhook_models` + `outbox` (the
webhooks' tables and the events written with the transitions they tell), `alembic/` (the migrations; the
schema is never created any other way).

May import: SQLAlchemy, Alembic, the settings and plain helpers at the service's root (`config`,
`schemas`, `security`), `service.costs` and `worker.contract`. Never the engine (`service.engine`), the
HTTP edge (`service.api`, `service.http`, `service.dashboard`, `service.main`) or anything that computes.
"""
