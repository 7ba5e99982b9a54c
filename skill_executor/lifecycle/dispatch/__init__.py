"""Where accepted runs execute (the two complete implementations of the lifecycle's
:class:`~skill_executor.lifecycle.seam.Dispatch`): in this process (:class:`InProcess`:
the embedded service, the CLI, and a cluster worker's runs) or, in a cluster over Postgres,
queued for workers (:class:`QueueDispatch` on API replicas, :class:`Worker` in
``skill-executor worker``), with :func:`sweep` for lost workers."""

from .local import InProcess
from .postgres import QueueDispatch, SessionLost
from .sweep import sweep
from .worker import Worker

__all__ = ["InProcess", "QueueDispatch", "SessionLost", "Worker", "sweep"]
