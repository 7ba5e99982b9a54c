"""Traces of runs across processes: a run records the W3C ``traceparent`` of its root span
(written by the process that admitted it, in the transaction that records it; a worker
continues the trace from it) and its trace id (32 hex digits, shown in the run's record).
Both stay NULL while tracing is off.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("trace_id", sa.Text))
        batch.add_column(sa.Column("traceparent", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        for column in ("traceparent", "trace_id"):
            batch.drop_column(column)
