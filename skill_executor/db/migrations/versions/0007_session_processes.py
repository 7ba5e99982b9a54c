"""A cluster's interactive processes: the URL replicas reach a worker at, which worker runs
each session process, and the secret of replicas' calls to workers.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("workers", sa.Column("url", sa.Text(), nullable=True))
    op.create_table(
        "session_processes",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("session", sa.Text(), nullable=False),
        sa.Column("process_id", sa.Text(), nullable=False),
        sa.Column("worker_id", sa.Text(), nullable=False),
        sa.Column("info", sa.Text(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "session", "process_id", name=op.f("pk_session_processes")),
    )
    op.create_index("ix_session_processes_started_at", "session_processes", ["started_at"])
    op.create_table(
        "cluster_secrets",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_cluster_secrets")),
    )


def downgrade() -> None:
    op.drop_table("cluster_secrets")
    op.drop_index("ix_session_processes_started_at", table_name="session_processes")
    op.drop_table("session_processes")
    op.drop_column("workers", "url")
