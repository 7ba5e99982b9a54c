"""A tenant's runs by creation time: ``GET /v1/runs`` pages through them newest first by
keyset (created_at, run_id); without this index every page sorts all of the tenant's runs.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_runs_owner_created", "runs", ["owner", "created_at", "run_id"])


def downgrade() -> None:
    op.drop_index("ix_runs_owner_created", table_name="runs")
