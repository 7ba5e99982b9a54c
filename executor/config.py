"""Service settings: every knob is a ``SKILL_EXECUTOR_*`` environment variable.

List settings accept a comma-separated string (``SKILL_EXECUTOR_SKILLS_DIRS=a,b``) or a
JSON array.  Settings are the only process-wide state; everything else is built from
them and passed explicitly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

MiB = 1024 * 1024
GiB = 1024 * MiB

PathList = Annotated[list[Path], NoDecode]
StrList = Annotated[list[str], NoDecode]


def _split_list(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


class Settings(BaseSettings):
    """Defaults are the embedded configuration: local disk, SQLite, ``./skills``."""

    model_config = SettingsConfigDict(env_prefix="SKILL_EXECUTOR_", extra="ignore")

    # -- where things live ---------------------------------------------------------
    skills_dirs: PathList = Field(default_factory=lambda: [Path("skills")])
    data_dir: Path = Path("data")
    workspace_root: Path | None = None  # default: <data_dir>/workspaces
    skills_refresh_seconds: float = 2.0

    # -- runs ----------------------------------------------------------------------
    runtime: Literal["docker", "local"] = "docker"
    default_timeout: float = 60.0
    max_timeout: float = 900.0
    stdout_max_bytes: int = 1 * MiB
    stderr_max_bytes: int = 1 * MiB
    max_stdin_bytes: int = 4 * MiB
    max_command_bytes: int = 128 * 1024 - 1  # the kernel's limit for one argument
    max_env_vars: int = 256
    max_env_bytes: int = 1 * MiB
    max_inputs: int = 64
    max_staged_bytes: int = 512 * MiB
    allowed_host_roots: PathList = Field(default_factory=list)
    session_ttl_seconds: float = 3600.0
    session_disk_bytes: int = 1 * GiB  # a session's work/ across its runs
    keep_workspaces: bool = False
    artifact_ttl_seconds: float | None = Field(default=None, gt=0)  # None: artifact versions never expire

    # -- agent context (GET/POST /v1/sessions/{session}/context; expires with session_ttl_seconds) --
    context_max_tokens: int = Field(default=200_000, gt=0)  # the agent's context window
    context_skill_tokens: int = Field(default=8_000, gt=0)  # the most one loaded skill may take
    context_doc_tokens: int = Field(default=8_000, gt=0)  # the most one selected doc may take
    context_high_water: float = Field(default=0.9, gt=0, le=1)  # loads stop at this share of the maximum
    context_token_counter: Literal["estimate", "tiktoken-cl100k"] = "estimate"

    # -- output caps: the most a request may ask for --------------------------------
    max_output_files: int = 1000
    max_output_file_bytes: int = 64 * MiB
    max_output_total_bytes: int = 256 * MiB

    # -- HTTP service ---------------------------------------------------------------
    host: str = "127.0.0.1"
    port: int = 8080
    api_keys: StrList = Field(default_factory=list)
    admin_keys: StrList = Field(default_factory=list)
    api_keys_file: Path | None = None
    allowed_origins: StrList = Field(default_factory=list)  # browser origins allowed cross-origin (CORS)
    max_request_bytes: int = 64 * MiB
    max_file_read_bytes: int = 4 * MiB
    install_dir: Path | None = None  # default: <data_dir>/skills
    # -- skill registry (uploads: POST /v1/skills, POST /v1/skills/{name}/versions) --
    skill_upload_max_bytes: int = 64 * MiB  # one upload (an archive, or all files[] parts together)
    skill_upload_max_files: int = 2000  # files in one upload
    skill_upload_strict: bool = False  # spec violations refuse an upload (a request's ?strict= overrides)
    skill_refuse_reserved_names: bool = False  # refuse names the hosted platforms reserve ("anthropic", "claude")
    log_json: bool = True
    # How long a shutdown (SIGTERM) lets runs in flight finish before cancelling them;
    # under `docker stop`'s 10 s with room for the cancellation and the clean-up.
    shutdown_grace_seconds: float = Field(default=8.0, ge=0)

    # -- Docker runtime --------------------------------------------------------------
    docker_image: str = "skill-executor/runner:latest"
    docker_memory_bytes: int = 1 * GiB
    docker_cpus: float = 1.0
    docker_pids_limit: int = 256
    docker_user: str = "1000:1000"
    docker_network_disabled: bool = True
    docker_tmpfs_bytes: int = 64 * MiB
    docker_disk_bytes: int = 1 * GiB
    # hard: a file system per workspace refuses writes past the cap; soft: polled, the run stopped
    disk_cap: Literal["hard", "soft"] = "hard"
    docker_nofile: int = 1024
    docker_oci_runtime: str | None = None
    docker_allow_vsock: bool = False  # AF_VSOCK sockets (not covered by a network namespace)
    pool_size: int = 2
    pool_max_idle_seconds: float = 600.0
    max_concurrent_runs: int = Field(default_factory=lambda: 2 * max(1, os.cpu_count() or 1))
    max_queued_runs: int = 64
    instance_id: str | None = None  # this process's lease name under the workspace root (default: random)
    cleanup_workers: int = 4  # parallel removals of used containers and workspaces

    # -- skill dependencies (resolved on the host into <data_dir>/envs, never in a run) ----
    skill_deps: Literal["install", "off"] = "install"
    package_index_url: str | None = None  # default: pip's own (its configuration, else PyPI)
    wheelhouse: Path | None = None  # a folder of wheels: resolve from it alone (pip --no-index --find-links)
    npm_registry: str | None = None  # default: npm's own
    npm_wheelhouse: Path | None = None  # a folder of npm tarballs (*.tgz): resolve from it alone (npm --offline)

    @field_validator("api_keys", "admin_keys", "allowed_origins", mode="before")
    @classmethod
    def _strs(cls, value: Any) -> Any:
        return _split_list(value)

    @field_validator("skills_dirs", "allowed_host_roots", mode="before")
    @classmethod
    def _paths(cls, value: Any) -> Any:
        return _split_list(value)

    @property
    def workspaces(self) -> Path:
        return self.workspace_root or self.data_dir / "workspaces"

    @property
    def artifacts_dir(self) -> Path:
        return self.data_dir / "artifacts"

    @property
    def envs_dir(self) -> Path:
        """Where skills' dependency environments live (mounted read-only into every container)."""
        return (self.data_dir / "envs").resolve()

    @property
    def install_root(self) -> Path:
        """Where installs go, and the only skills folder the service writes to."""
        return self.install_dir or self.data_dir / "skills"

    @property
    def registry_dir(self) -> Path:
        """The skill registry: immutable versions, their blobs, pointers and the audit log."""
        return self.data_dir / "registry"

    @property
    def skill_roots(self) -> list[Path]:
        """Where skills are discovered: the read-only skills dirs, then the install root."""
        return [*self.skills_dirs, self.install_root]
