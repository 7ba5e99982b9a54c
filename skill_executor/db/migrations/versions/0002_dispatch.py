"""Dispatch over Postgres (API replicas and run workers): the ``workers`` registry with
their leases, ``run_events`` (a run's live events, readable by every replica),
``session_leases`` (which worker holds a session's workspace), the columns a queued run
needs (tier, its job, the worker that runs it, attempt, deadline, cancel request, start
time) and, on Postgres only, procrastinate's own schema (its jobs, queues and functions),
frozen in ``migrations/procrastinate/schema-<version>.sql``: a bump of the library is a new
revision that applies its ``sql/migrations`` files (a test compares the two).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

#: The procrastinate version whose schema this revision applies (pinned in pyproject.toml).
PROCRASTINATE_SCHEMA = Path(__file__).resolve().parent.parent / "procrastinate" / "schema-3.10.0.sql"


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("tier", sa.Text))
        batch.add_column(sa.Column("job_id", sa.BigInteger))
        batch.add_column(sa.Column("worker_id", sa.Text))
        batch.add_column(sa.Column("attempt", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("deadline", sa.Float))
        batch.add_column(sa.Column("cancel_requested", sa.Boolean, nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("started_at", sa.Float))
    op.create_index("ix_runs_worker_id", "runs", ["worker_id"])
    op.create_table(
        "workers",
        sa.Column("worker_id", sa.Text, nullable=False),
        sa.Column("host", sa.Text, nullable=False),
        sa.Column("tiers", sa.Text, nullable=False),
        sa.Column("capacity", sa.Integer, nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("lease_until", sa.Float, nullable=False),
        sa.Column("stopping", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.PrimaryKeyConstraint("worker_id", name="pk_workers"),
    )
    op.create_table(
        "run_events",
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("run_id", "seq", name="pk_run_events"),
    )
    op.create_table(
        "session_leases",
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("session", sa.Text, nullable=False),
        sa.Column("worker_id", sa.Text, nullable=False),
        sa.Column("taken_at", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("tenant", "session", name="pk_session_leases"),
    )
    op.create_index("ix_session_leases_worker_id", "session_leases", ["worker_id"])
    if op.get_bind().dialect.name == "postgresql":
        # One driver call: the file is many statements (and dollar-quoted bodies), no parameters.
        driver = op.get_bind().connection.driver_connection
        driver.execute(PROCRASTINATE_SCHEMA.read_text())  # type: ignore[union-attr]


def downgrade() -> None:
    op.drop_index("ix_session_leases_worker_id", "session_leases")
    for table in ("session_leases", "run_events", "workers"):
        op.drop_table(table)
    op.drop_index("ix_runs_worker_id", "runs")
    with op.batch_alter_table("runs") as batch:
        for column in ("started_at", "cancel_requested", "deadline", "attempt", "worker_id", "job_id", "tier"):
            batch.drop_column(column)
