"""Wire models of the HTTP API (they make /openapi.json precise), by area: :mod:`.errors`,
:mod:`.skills`, :mod:`.runs`, :mod:`.artifacts`, :mod:`.tools`, :mod:`.sessions` (context
and processes), :mod:`.system` (health).  This package's face: routes import from here."""

from __future__ import annotations

from .artifacts import ArtifactList, ArtifactModel
from .errors import ERRORS, ErrorBody, ErrorResponse
from .runs import ApprovalRequest, RunAccepted, RunList, RunRecordModel, RunSummary
from .sessions import (
    ContextBudget,
    ContextLoad,
    ContextSelectDocs,
    ContextSkill,
    Evict,
    ProcessInfo,
    ProcessList,
    ProcessOutput,
    ProcessSignal,
    ProcessStart,
    ProcessWrite,
)
from .skills import (
    AuditLog,
    AuditRecord,
    DocEntry,
    DocList,
    FileInfo,
    Finding,
    Installed,
    SkillDetail,
    SkillList,
    SkillSummary,
    SkillUpdate,
    ValidationFinding,
    VersionFile,
    VersionInfo,
    VersionList,
)
from .system import Check, Health
from .tools import TOOL_NAME_MAX, FunctionCallItem, ToolCall, ToolCallResult, ToolFormat, ToolList

__all__ = [
    "ApprovalRequest",
    "ArtifactList",
    "ArtifactModel",
    "AuditLog",
    "AuditRecord",
    "Check",
    "ContextBudget",
    "ContextLoad",
    "ContextSelectDocs",
    "ContextSkill",
    "DocEntry",
    "DocList",
    "ERRORS",
    "ErrorBody",
    "ErrorResponse",
    "Evict",
    "FileInfo",
    "Finding",
    "FunctionCallItem",
    "Health",
    "Installed",
    "ProcessInfo",
    "ProcessList",
    "ProcessOutput",
    "ProcessSignal",
    "ProcessStart",
    "ProcessWrite",
    "RunAccepted",
    "RunList",
    "RunRecordModel",
    "RunSummary",
    "SkillDetail",
    "SkillList",
    "SkillSummary",
    "SkillUpdate",
    "TOOL_NAME_MAX",
    "ToolCall",
    "ToolCallResult",
    "ToolFormat",
    "ToolList",
    "ValidationFinding",
    "VersionFile",
    "VersionInfo",
    "VersionList",
]
