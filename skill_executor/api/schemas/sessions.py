"""A session's agent context (``/v1/sessions/{session}/context``) and interactive
processes (``/v1/sessions/{session}/processes``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, StrictStr

from ...context.budget import MAX_BUDGET_TOKENS
from ...runs.models import MAX_NETWORK_HOSTS, EgressRequest
from ...runs.sessionnet import KEEP_EVENTS

# -- agent context (/v1/sessions/{session}/context) ---------------------------------------


class ContextBudget(BaseModel):
    """Overrides of the context budget for one request (the settings' otherwise)."""

    model_config = {"extra": "forbid"}
    max_tokens: int | None = Field(default=None, gt=0, le=MAX_BUDGET_TOKENS)
    skill_tokens: int | None = Field(default=None, gt=0, le=MAX_BUDGET_TOKENS)
    doc_tokens: int | None = Field(default=None, gt=0, le=MAX_BUDGET_TOKENS)
    high_water: float | None = Field(default=None, gt=0, le=1)


Evict = Literal["none", "lru", "mention"]


class ContextLoad(BaseModel):
    model_config = {"extra": "forbid"}
    skill: str = Field(min_length=1, max_length=300, description="name, or name@version to pin another version")
    evict: Evict = Field(default="none", description="when it does not fit: none (refuse), lru, mention")
    messages: list[str] = Field(
        default_factory=list, max_length=100, description="the last messages' text, for evict=mention"
    )
    budget: ContextBudget | None = None


class ContextSkill(BaseModel):
    model_config = {"extra": "forbid"}
    skill: str = Field(min_length=1, max_length=300)


class ContextSelectDocs(BaseModel):
    model_config = {"extra": "forbid"}
    skill: str = Field(min_length=1, max_length=300)
    docs: list[str] | None = Field(default=None, max_length=1000, description="doc paths (skill_list_docs)")
    all: bool = Field(default=False, description="every doc the skill ships")
    mode: Literal["add", "replace", "clear"] = "add"
    evict: Evict = "none"
    messages: list[str] = Field(default_factory=list, max_length=100)
    budget: ContextBudget | None = None


# -- a session's interactive processes (/v1/sessions/{session}/processes) -----------------


class ProcessStart(BaseModel):
    """Start a long-lived process in the session's sandbox (its work/ is the working folder)."""

    command: StrictStr | list[StrictStr] = Field(
        description="a shell command (run by bash -c), or an argv list", examples=["python3 -i -u"]
    )
    env: dict[StrictStr, StrictStr] = Field(default_factory=dict, description="extra environment variables")
    cwd: StrictStr | None = Field(default=None, max_length=4096, description="working folder (relative: in work/)")
    pty: bool = Field(default=False, description="run it on a pseudo-terminal (stdout and stderr are one stream)")
    timeout: float | None = Field(
        default=None, gt=0, description="wall-clock limit in seconds (at most SKILL_EXECUTOR_PROCESS_MAX_SECONDS)"
    )
    idle_timeout: float | None = Field(
        default=None,
        gt=0,
        description="killed after this long with no input and no output (at most SKILL_EXECUTOR_PROCESS_IDLE_SECONDS)",
    )


class ProcessInfo(BaseModel):
    """A process's state."""

    id: str
    session: str
    command: str | list[str]
    pty: bool
    running: bool
    exit_code: int | None = Field(description="once ended: its exit status (128+N for signal N)")
    reason: Literal["exited", "killed", "timeout", "idle", "session_ended", "lost"] | None = Field(
        description="why it ended (or is ending): exited by itself, killed, its wall-clock or idle limit, "
        "its session ended"
    )
    started_at: float
    ended_at: float | None
    total: int = Field(description="bytes of output it has written so far")
    timeout: float
    idle_timeout: float


class ProcessList(BaseModel):
    processes: list[ProcessInfo]


class ProcessWrite(BaseModel):
    """Bytes for the process's stdin (UTF-8 text), and/or close it."""

    data: StrictStr = Field(default="", max_length=1024 * 1024, examples=["1+1\n"])
    eof: bool = Field(default=False, description="close its stdin after the data")


class ProcessSignal(BaseModel):
    signal: StrictStr = Field(
        examples=["INT"], description="INT, TERM, KILL, HUP, QUIT, USR1, USR2, STOP, CONT or WINCH"
    )


class ProcessOutput(BaseModel):
    """Output past ``after`` that the ring still holds (byte offsets into everything written)."""

    output: str = Field(description="the bytes as UTF-8 text (invalid sequences replaced)")
    offset: int = Field(description="the offset of the first byte answered")
    next: int = Field(description="the offset to poll after next")
    total: int = Field(description="bytes written in all")
    dropped: int = Field(description="bytes past `after` no longer held (the ring's cap), skipped")
    running: bool
    exit_code: int | None
    reason: str | None


# -- a session's network (/v1/sessions/{session}/network) and its end -----------------------


class SessionNetworkOpen(BaseModel):
    """Open the session's network: the egress of the policy rule of the caller's key and
    ``skill``, narrowed to ``allow`` when given (never more than the rule)."""

    model_config = {"extra": "forbid"}
    skill: StrictStr = Field(min_length=1, max_length=300, description="the skill whose policy rule's egress applies")
    allow: list[StrictStr] | None = Field(
        default=None,
        max_length=MAX_NETWORK_HOSTS,
        description="hosts the session may reach, each within the rule's egress.allow (null: the rule's)",
        examples=[["pypi.org", "files.pythonhosted.org", "api.github.com"]],
    )


class SessionNetworkNarrow(BaseModel):
    """Narrow the session's network: each host within what it may reach now ([]: nothing)."""

    model_config = {"extra": "forbid"}
    allow: list[StrictStr] = Field(max_length=MAX_NETWORK_HOSTS, examples=[["api.github.com"]])


class SessionNetworkState(BaseModel):
    """A session's network: its rule, what it may reach now, its requests."""

    session: str
    rule: str = Field(description="the policy rule whose egress the session has")
    allow: list[str] = Field(description="what the session's processes and runs may reach now")
    rule_allow: list[str] = Field(description="the rule's egress.allow (the most the session had)")
    secrets: list[str] = Field(description="the secrets whose placeholders its processes and runs hold")
    opened_at: float
    narrowed_at: float | None
    requests: dict[str, int] = Field(description="its requests so far, by decision (allowed, denied, limited)")
    events: list[EgressRequest] = Field(description=f"its newest requests (at most {KEEP_EVENTS})")


class SessionEnded(BaseModel):
    session: str
    removed: bool = Field(description="its work/ was there and is deleted (false: there was none, or a run holds it)")
