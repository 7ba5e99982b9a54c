"""Where accepted runs go (between :mod:`skill_executor.runs` and the service): in this
process (:class:`LocalDispatcher`, the embedded service and a worker's runs) or, in a
cluster over Postgres, to workers (:class:`PostgresDispatcher` on API replicas,
:class:`Worker` in ``skill-executor worker``), with :func:`sweep` for lost workers."""

from .local import LocalDispatcher
from .postgres import PostgresDispatcher, SessionLost
from .sweep import sweep
from .worker import Worker

__all__ = ["LocalDispatcher", "PostgresDispatcher", "SessionLost", "Worker", "sweep"]
