"""A tenant's runs of sessions by time: the cluster's session quota counts a tenant's live
sessions (a run within the TTL) at every submission of a session run, and the queue's sweep
looks for a session's running run; without this index both scan every run.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

WHERE = sa.text("session IS NOT NULL")


def upgrade() -> None:
    op.create_index(
        "ix_runs_owner_session",
        "runs",
        ["owner", "session", "updated_at"],
        postgresql_where=WHERE,
        sqlite_where=WHERE,
    )


def downgrade() -> None:
    op.drop_index("ix_runs_owner_session", table_name="runs")
