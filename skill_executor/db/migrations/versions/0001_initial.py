"""The first shared schema: runs, idempotency keys, artifacts, the skill registry, the
audit log and agents' contexts (before, each lived in its own SQLite file).

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("run_id", sa.Text, primary_key=True),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("skill", sa.Text, nullable=False),
        sa.Column("session", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("request", sa.Text, nullable=False),
        sa.Column("result", sa.Text),
        sa.Column("error", sa.Text),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("events", sa.Integer),
        sa.Column("instance", sa.Text),
        sa.PrimaryKeyConstraint("run_id", name="pk_runs"),
    )
    op.create_index("ix_runs_status", "runs", ["status"])
    op.create_table(
        "idempotency",
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("fingerprint", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("owner", "key", name="pk_idempotency"),
    )
    op.create_table(
        "artifacts",
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("sha256", sa.Text, nullable=False),
        sa.Column("mime_type", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("run_id", sa.Text),
        sa.PrimaryKeyConstraint("owner", "name", "version", name="pk_artifacts"),
    )
    op.create_index("ix_artifacts_sha256", "artifacts", ["sha256"])
    op.create_index("ix_artifacts_created_at", "artifacts", ["created_at"])
    op.create_table(
        "artifact_counters",
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("last_version", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("owner", "name", name="pk_artifact_counters"),
    )
    op.create_table(
        "orphan_blobs",
        sa.Column("sha256", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("sha256", name="pk_orphan_blobs"),
    )
    op.create_table(
        "skills",
        sa.Column("skill", sa.Text, nullable=False),
        sa.Column("next_version", sa.Integer, nullable=False),
        sa.Column("default_version", sa.Integer),
        sa.Column("latest_version", sa.Integer),
        sa.Column("default_held", sa.Integer, nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("skill", name="pk_skills"),
    )
    op.create_table(
        "skill_versions",
        sa.Column("skill", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("digest", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("actor", sa.Text, nullable=False),
        sa.Column("dirname", sa.Text, nullable=False),
        sa.Column("manifest", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("skill", "version", name="pk_skill_versions"),
    )
    op.create_index("ix_skill_versions_skill_digest", "skill_versions", ["skill", "digest"])
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("actor", sa.Text, nullable=False),
        sa.Column("action", sa.Text, nullable=False),
        sa.Column("skill", sa.Text, nullable=False),
        sa.Column("version", sa.Integer),
        sa.Column("digest", sa.Text),
        sa.Column("detail", sa.Text),
        sa.PrimaryKeyConstraint("id", name="pk_audit"),
    )
    op.create_table(
        "contexts",
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("session", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("updated", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("tenant", "session", name="pk_contexts"),
    )
    op.create_index("ix_contexts_updated", "contexts", ["updated"])


def downgrade() -> None:
    for table in ("contexts", "audit", "skill_versions", "skills", "orphan_blobs", "artifact_counters"):
        op.drop_table(table)
    op.drop_index("ix_artifacts_created_at", "artifacts")
    op.drop_index("ix_artifacts_sha256", "artifacts")
    op.drop_table("artifacts")
    op.drop_table("idempotency")
    op.drop_index("ix_runs_status", "runs")
    op.drop_table("runs")
