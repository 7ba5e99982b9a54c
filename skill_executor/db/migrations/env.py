"""Alembic's environment: migrations run on the connection :func:`skill_executor.db.migrate.upgrade`
hands over (there is no alembic.ini: ``skill-executor db upgrade`` is the command)."""

from __future__ import annotations

from alembic import context

from skill_executor.db.schema import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=True,  # SQLite changes tables by copying them
    transaction_per_migration=True,
)
with context.begin_transaction():
    context.run_migrations()
