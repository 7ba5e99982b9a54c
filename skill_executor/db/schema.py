"""Every table of the service, in one SQLAlchemy ``MetaData``: the same schema on SQLite
(the embedded default) and Postgres.  The migrations (``migrations/versions``) create and
change it; this module is what the code reads and writes through.

Times are seconds since the epoch (floats), JSON is text, and a tenant is an API key id
(:mod:`skill_executor.access`).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
)

#: Constraint names the same on every database (migrations refer to them).
metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# -- runs -------------------------------------------------------------------------------

runs = Table(
    "runs",
    metadata,
    Column("run_id", Text, primary_key=True),
    Column("status", Text, nullable=False),
    Column("skill", Text, nullable=False),
    Column("session", Text),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("request", Text, nullable=False),
    Column("result", Text),
    Column("error", Text),
    Column("owner", Text, nullable=False),
    #: How many events the run's live stream had (None: not recorded).
    Column("events", Integer),
    #: The service instance (its data dir's id) that took the run.
    Column("instance", Text),
    # -- dispatch over Postgres (skill_executor.lifecycle.dispatch); unused by the embedded service --
    #: The image tier whose workers may run it.
    Column("tier", Text),
    #: Its procrastinate job.
    Column("job_id", BigInteger),
    #: The worker that claimed it (None while queued).
    Column("worker_id", Text),
    #: How many times a worker claimed it (1 once started; never re-executed unless retried).
    Column("attempt", Integer, nullable=False, server_default="0"),
    Column("deadline", Float),
    Column("cancel_requested", Boolean, nullable=False, server_default="false"),
    Column("started_at", Float),
    # -- tracing (skill_executor.tracing); NULL while it is off --
    #: The trace's id (32 hex digits).
    Column("trace_id", Text),
    #: The W3C ``traceparent`` of the run's root span: where the process executing it continues.
    Column("traceparent", Text),
)
Index("ix_runs_status", runs.c.status)
#: A tenant's session runs by time (the cluster's session quota; migration 0004).
Index(
    "ix_runs_owner_session",
    runs.c.owner,
    runs.c.session,
    runs.c.updated_at,
    postgresql_where=runs.c.session.is_not(None),
    sqlite_where=runs.c.session.is_not(None),
)
Index("ix_runs_worker_id", runs.c.worker_id)
#: A tenant's runs, newest first (``GET /v1/runs``'s keyset pages; migration 0005).
Index("ix_runs_owner_created", runs.c.owner, runs.c.created_at, runs.c.run_id)

idempotency = Table(
    "idempotency",
    metadata,
    Column("owner", Text, nullable=False),
    Column("key", Text, nullable=False),
    Column("fingerprint", Text, nullable=False),
    Column("run_id", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    PrimaryKeyConstraint("owner", "key"),
)

#: Decisions on runs held for approval by the command policy (skill_executor.policy;
#: migration 0006): the audit record of each, and what ``on-first-use`` remembers.
run_approvals = Table(
    "run_approvals",
    metadata,
    Column("run_id", Text, primary_key=True),
    Column("owner", Text, nullable=False),
    Column("skill", Text, nullable=False),
    #: The programs the command starts (JSON list; [] when they cannot all be known).
    Column("programs", Text, nullable=False),
    #: approve, reject or expire.
    Column("decision", Text, nullable=False),
    #: Who decided: a key id, or "timeout".
    Column("decided_by", Text, nullable=False),
    #: How: rest, mcp-elicitation or timeout.
    Column("via", Text, nullable=False),
    Column("reason", Text),
    Column("decided_at", Float, nullable=False),
)
Index("ix_run_approvals_owner_skill", run_approvals.c.owner, run_approvals.c.skill)

#: Decisions on hosts asked for by runs whose egress rule says ``ask: true`` (migration 0008):
#: the audit record of each, and the hosts later runs of the key and skill may reach unasked.
egress_approvals = Table(
    "egress_approvals",
    metadata,
    Column("approval_id", Text, primary_key=True),
    Column("owner", Text, nullable=False),
    #: The skill (lower case; ``bundle:<name>`` for an inline bundle's, never remembered).
    Column("skill", Text, nullable=False),
    Column("host", Text, nullable=False),
    Column("rule", Text, nullable=False),
    #: The run whose request asked.
    Column("run_id", Text, nullable=False),
    #: approve, reject or expire.
    Column("decision", Text, nullable=False),
    #: Who decided: a key id, or "timeout".
    Column("decided_by", Text, nullable=False),
    #: How: rest, mcp-elicitation or timeout.
    Column("via", Text, nullable=False),
    Column("reason", Text),
    Column("decided_at", Float, nullable=False),
)
Index("ix_egress_approvals_owner_skill", egress_approvals.c.owner, egress_approvals.c.skill)

# -- artifacts --------------------------------------------------------------------------

artifacts = Table(
    "artifacts",
    metadata,
    Column("owner", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("sha256", Text, nullable=False),
    Column("mime_type", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("run_id", Text),
    PrimaryKeyConstraint("owner", "name", "version"),
)
Index("ix_artifacts_sha256", artifacts.c.sha256)
Index("ix_artifacts_created_at", artifacts.c.created_at)

#: The last version ever given to a name (rows may be deleted; numbers are not reused).
artifact_counters = Table(
    "artifact_counters",
    metadata,
    Column("owner", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("last_version", Integer, nullable=False),
    PrimaryKeyConstraint("owner", "name"),
)

#: Blobs whose rows were deleted: removed by the collector unless referenced again.
orphan_blobs = Table("orphan_blobs", metadata, Column("sha256", Text, primary_key=True))

# -- the skill registry -----------------------------------------------------------------

skills = Table(
    "skills",
    metadata,
    Column("skill", Text, primary_key=True),
    Column("next_version", Integer, nullable=False),
    Column("default_version", Integer),
    Column("latest_version", Integer),
    Column("default_held", Integer, nullable=False, server_default="0"),
)

skill_versions = Table(
    "skill_versions",
    metadata,
    Column("skill", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("digest", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("source", Text, nullable=False),
    Column("actor", Text, nullable=False),
    Column("dirname", Text, nullable=False),
    Column("manifest", Text, nullable=False),
    PrimaryKeyConstraint("skill", "version"),
)
Index("ix_skill_versions_skill_digest", skill_versions.c.skill, skill_versions.c.digest)

audit = Table(
    "audit",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),
    Column("actor", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("skill", Text, nullable=False),
    Column("version", Integer),
    Column("digest", Text),
    Column("detail", Text),
)

# -- agents' contexts -------------------------------------------------------------------

contexts = Table(
    "contexts",
    metadata,
    Column("tenant", Text, nullable=False),
    Column("session", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("updated", Float, nullable=False),
    PrimaryKeyConstraint("tenant", "session"),
)
Index("ix_contexts_updated", contexts.c.updated)

# -- dispatch over Postgres: workers, their runs' events, sessions' homes ------------------

#: Run workers (``skill-executor worker``) and their leases (database clock, seconds).
workers = Table(
    "workers",
    metadata,
    Column("worker_id", Text, primary_key=True),
    Column("host", Text, nullable=False),
    #: JSON list of the image tiers it runs.
    Column("tiers", Text, nullable=False),
    Column("capacity", Integer, nullable=False),
    Column("started_at", Float, nullable=False),
    Column("lease_until", Float, nullable=False),
    Column("stopping", Boolean, nullable=False, server_default="false"),
    #: Where replicas reach it (its sessions' processes), ``http://host:port``.
    Column("url", Text),
)

#: A run's live events, numbered from 1 (the ids of its Server-Sent Events).
run_events = Table(
    "run_events",
    metadata,
    Column("run_id", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("kind", Text, nullable=False),
    #: JSON.
    Column("data", Text, nullable=False),
    Column("at", Float, nullable=False),
    PrimaryKeyConstraint("run_id", "seq"),
)

#: The worker holding a session's workspace: the session's runs go to it.
session_leases = Table(
    "session_leases",
    metadata,
    Column("tenant", Text, nullable=False),
    Column("session", Text, nullable=False),
    Column("worker_id", Text, nullable=False),
    Column("taken_at", Float, nullable=False),
    PrimaryKeyConstraint("tenant", "session"),
)
Index("ix_session_leases_worker_id", session_leases.c.worker_id)

#: A session's interactive processes in a cluster: the worker each runs on (its calls go
#: there; once that worker is gone, the process is reported lost).
session_processes = Table(
    "session_processes",
    metadata,
    Column("tenant", Text, nullable=False),
    Column("session", Text, nullable=False),
    Column("process_id", Text, nullable=False),
    Column("worker_id", Text, nullable=False),
    #: JSON: the process's state as it started (what a lost process is reported as).
    Column("info", Text, nullable=False),
    Column("started_at", Float, nullable=False),
    PrimaryKeyConstraint("tenant", "session", "process_id"),
)
Index("ix_session_processes_started_at", session_processes.c.started_at)

#: Secrets the processes of a cluster share (``internal``: the replicas' calls to workers).
cluster_secrets = Table(
    "cluster_secrets",
    metadata,
    Column("name", Text, primary_key=True),
    Column("value", Text, nullable=False),
)
