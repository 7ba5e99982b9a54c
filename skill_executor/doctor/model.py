"""The doctor's report: what a skill needs, what the sandbox has, what is missing (the JSON of
``GET /v1/skills/{name}/doctor`` and ``skill-executor skills doctor --json``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

NO_NETWORK = "runs have no network access: whatever needs it fails at run time unless the image provides it"
NO_NETWORK_LOCAL = "the local runtime (development only) has the host's network; runs of the Docker runtime have none"


class CommandNeed(BaseModel):
    name: str
    found: bool | None = Field(description="null: not checked (no run could start; see findings)")
    path: str | None = Field(default=None, description="where the sandbox finds it")
    optional: bool = Field(
        default=False, description="only looked for (shutil.which, command -v) or run in try/except FileNotFoundError"
    )
    confidence: Literal["sure", "guess"] = Field(
        default="sure",
        description="sure: run by the skill's code or a shell block of its docs; guess: every use is read from "
        "prose (an untagged block, a line the shell parser could not read, an installer's line in the docs)",
    )
    used_in: list[str] = Field(description="file:line of each use")


class PythonNeed(BaseModel):
    module: str = Field(description="the top-level import name")
    distribution_hint: str | None = Field(default=None, description="the usual distribution, when named otherwise")
    found: bool | None = Field(description="null: not checked (no run could start; see findings)")
    optional: bool = Field(description="every import of it is guarded (try/except ImportError, TYPE_CHECKING)")
    used_in: list[str]


class PackageNeed(BaseModel):
    requirement: str = Field(description="what a `pip install` line of the skill installs (normalised)")
    found: bool | None = Field(description="installed and satisfying the requirement; null: not checked")
    version: str | None = Field(default=None, description="the version the sandbox has")
    confidence: Literal["sure", "guess"] = Field(default="sure", description="as for commands")
    used_in: list[str]


class NodeNeed(BaseModel):
    module: str
    found: bool | None = Field(description="null: not checked (no run could start; see findings)")
    used_in: list[str]


class FileNeed(BaseModel):
    path: str = Field(description="a script the skill's instructions run, relative to the skill, that it does not hold")
    used_in: list[str] = Field(description="file:line of each instruction running it")


class RuntimeNeed(BaseModel):
    name: str = Field(description="`node` or `python`")
    requires: str = Field(description="the version asked for, as a specifier (`>=22`)")
    version: str | None = Field(default=None, description="the sandbox's (null: absent, or not checked)")
    found: bool | None = Field(description="the sandbox's version satisfies it; null: not checked")
    used_in: list[str] = Field(description="file:line: requires-python, engines.node, the docs' prose")


class Missing(BaseModel):
    commands: list[str] = Field(
        default_factory=list, description="required commands the skill surely runs (optional ones and guesses are not)"
    )
    guessed: list[str] = Field(
        default_factory=list,
        description="commands not found whose every use is a guess (read from prose): not counted in ok",
    )
    python: list[str] = Field(default_factory=list, description="required modules only (optional ones are not)")
    packages: list[str] = Field(
        default_factory=list,
        description="what `pip install` lines (sure ones) install that the sandbox does not have: runs cannot fetch it",
    )
    node: list[str] = Field(default_factory=list)
    runtimes: list[str] = Field(
        default_factory=list,
        description="interpreter versions the skill asks for that the sandbox's do not satisfy (`node>=22`)",
    )
    files: list[str] = Field(
        default_factory=list,
        description="scripts the instructions run by the skill's own path ({baseDir}/..., scripts/... in SKILL.md) "
        "that the skill does not hold (code left beside it in its repository, a renamed script)",
    )


class NetworkReason(BaseModel):
    file: str
    line: int
    why: str
    level: Literal["yes", "maybe"]


class Network(BaseModel):
    needed: Literal["yes", "maybe", "no"]
    reasons: list[NetworkReason] = Field(default_factory=list)
    note: str = NO_NETWORK


class DoctorFinding(BaseModel):
    code: str
    message: str
    file: str | None = None
    line: int | None = None


class DoctorReport(BaseModel):
    """What a skill needs, what the image (plus the skill's environment) has, what is missing."""

    skill: str
    image: str | None = Field(description="the runner image probed (None: the local runtime, the host)")
    commands: list[CommandNeed]
    python: list[PythonNeed]
    packages: list[PackageNeed] = Field(default_factory=list)
    node: list[NodeNeed]
    runtimes: list[RuntimeNeed] = Field(default_factory=list)
    files: list[FileNeed] = Field(default_factory=list)
    missing: Missing
    network: Network
    findings: list[DoctorFinding]
    ok: bool = Field(description="nothing required is missing and the skill does not need the network")
