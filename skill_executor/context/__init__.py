"""Agent context: per session, what an agent has loaded, rendered within a token budget.

:class:`ContextService` keeps, per (tenant, session), the loaded skills (pinned to the
version loaded), their selected docs, token counts and last use, in the embedded store
(:mod:`.store`); :mod:`.budget` refuses and evicts, :mod:`.render` writes the block an
agent puts in its system message, :mod:`.tokens` counts.
"""

from .budget import BudgetExceeded
from .model import Budget, Context, DocItem, Eviction, SkillItem
from .render import FORMATS
from .service import ContextService, NotLoaded, UnknownDoc, check_session
from .store import ContextStore
from .tokens import Counter, counter

__all__ = [
    "FORMATS",
    "Budget",
    "BudgetExceeded",
    "Context",
    "ContextService",
    "ContextStore",
    "Counter",
    "DocItem",
    "Eviction",
    "NotLoaded",
    "SkillItem",
    "UnknownDoc",
    "check_session",
    "counter",
]
