"""Alembic environment: runs on the connection `service.store.db.migrate` hands over (online mode only)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from service.store import models, webhook_models  # noqa: F401  (register the tables on Base.metadata)
from service.store.db import Base

connection: Connection | None = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through service.store.db.migrate(), which passes a connection")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying them
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
