"""Runs held for approval by the command policy: the decisions on them (the audit record of
each, and what an ``on-first-use`` rule remembers).  A held run's status is ``pending_approval``
(statuses are text: no change to ``runs``).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_approvals",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("skill", sa.Text(), nullable=False),
        sa.Column("programs", sa.Text(), nullable=False),
        sa.Column("decision", sa.Text(), nullable=False),
        sa.Column("decided_by", sa.Text(), nullable=False),
        sa.Column("via", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("decided_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_run_approvals")),
    )
    op.create_index("ix_run_approvals_owner_skill", "run_approvals", ["owner", "skill"])


def downgrade() -> None:
    op.drop_index("ix_run_approvals_owner_skill", table_name="run_approvals")
    op.drop_table("run_approvals")
