"""Hosts asked for by runs whose egress rule says ``ask: true``: the decision on each (the audit
record, and what later runs of the same key and skill are allowed without asking).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "egress_approvals",
        sa.Column("approval_id", sa.Text(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("skill", sa.Text(), nullable=False),
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("rule", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("decision", sa.Text(), nullable=False),
        sa.Column("decided_by", sa.Text(), nullable=False),
        sa.Column("via", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("decided_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("approval_id", name=op.f("pk_egress_approvals")),
    )
    op.create_index("ix_egress_approvals_owner_skill", "egress_approvals", ["owner", "skill"])


def downgrade() -> None:
    op.drop_index("ix_egress_approvals_owner_skill", table_name="egress_approvals")
    op.drop_table("egress_approvals")
