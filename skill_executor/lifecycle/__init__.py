"""A run's life, whichever door it came by: admission (where a run is refused), its record,
approvals, and reading, streaming, cancelling and waiting for it; where it executes is a
:class:`~skill_executor.lifecycle.seam.Dispatch`'s (:mod:`skill_executor.lifecycle.dispatch`).

:class:`RunManager` is the front door; :mod:`skill_executor.runs` below it is the single run.
"""

from .handle import RunHandle
from .manager import RunManager
from .outcomes import ShuttingDown, shutdown_error
from .records import RunRecord, RunStore
from .seam import Dispatch, Ticket
from .status import FINAL, PENDING, Status

__all__ = [
    "FINAL",
    "PENDING",
    "Dispatch",
    "RunHandle",
    "RunManager",
    "RunRecord",
    "RunStore",
    "ShuttingDown",
    "Status",
    "Ticket",
    "shutdown_error",
]
