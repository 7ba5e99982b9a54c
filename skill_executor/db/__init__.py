"""The service's database: one schema (:mod:`.schema`) on SQLite or Postgres, its
migrations (:mod:`.migrate`) and the engine with the service's transaction and error rules
(:mod:`.engine`).  Every store that keeps records takes a :class:`Database`."""

from .engine import Database, DatabaseUnavailable, StoreBusy
from .migrate import SchemaMismatch, upgrade

__all__ = ["Database", "DatabaseUnavailable", "SchemaMismatch", "StoreBusy", "upgrade"]
