"""A typed client for the skill-executor HTTP API: answers are pydantic models.

    from skill_executor_client import Client, RunRequest

    with Client("http://127.0.0.1:8080", api_key="...") as client:
        print([s.name for s in client.list_skills().skills])
        result = client.run(RunRequest(skill="math-tools", command="python3 scripts/fib.py 10"))
        print(result.exit_code, result.stdout)

:class:`AsyncClient` is the same, awaited.  Every non-2xx answer raises
:class:`ApiError` with the service's error code.  It needs only httpx and pydantic (not
the service's package): ``pip install ./skill-executor/client``.
"""

from .aio import AsyncClient
from .calls import ApiError
from .models import (
    ArtifactList,
    ArtifactModel,
    FileList,
    FileModel,
    Health,
    InputSpec,
    OutputFile,
    OutputSpec,
    RunAccepted,
    RunRecordModel,
    RunRequest,
    RunResult,
    SkillBundle,
    SkillDetail,
    SkillList,
    SkillSummary,
    ToolCallResult,
    ToolList,
)
from .sync import Client
from .typed import RunEvent

__all__ = [
    "ApiError",
    "ArtifactList",
    "ArtifactModel",
    "AsyncClient",
    "Client",
    "FileList",
    "FileModel",
    "Health",
    "InputSpec",
    "OutputFile",
    "OutputSpec",
    "RunAccepted",
    "RunEvent",
    "RunRecordModel",
    "RunRequest",
    "RunResult",
    "SkillBundle",
    "SkillDetail",
    "SkillList",
    "SkillSummary",
    "ToolCallResult",
    "ToolList",
]
