"""Service settings: every knob is a ``SKILL_EXECUTOR_*`` environment variable.

List settings accept a comma-separated string (``SKILL_EXECUTOR_SKILLS_DIRS=a,b``) or a
JSON array.  Settings are the only process-wide state; everything else is built from
them and passed explicitly.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

#: The Python tiers besides the default one (skill_executor.image.inputs.PYTHON_TIERS, which a
#: test keeps in step with this).
PYTHON_TIER_NAMES = ("3.13",)

MiB = 1024 * 1024
GiB = 1024 * MiB

PathList = Annotated[list[Path], NoDecode]
StrList = Annotated[list[str], NoDecode]


#: ``s3://bucket[/prefix]``: the bucket's syntax here; the prefix is checked like any object key
#: where the store is opened (skill_executor/objects).
_S3_URL = re.compile(r"s3://(?P<bucket>[^/]*)(?:/(?P<prefix>.*))?")
_S3_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
#: A Kubernetes object name (DNS-1123 subdomain).
_DNS_1123 = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@dataclass(frozen=True, slots=True)
class ObjectStoreLocation:
    """Where objects live: ``bucket`` (and ``prefix``) on S3, else the folder ``path``."""

    path: Path
    bucket: str | None = None
    prefix: str = ""


def _split_list(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


#: The embedded database's file under the data dir (when no database URL is set).
EMBEDDED_DATABASE = "skill-executor.db"


class Settings(BaseSettings):
    """Defaults are the embedded configuration: local disk, SQLite, ``./skills``."""

    # Each field's docstring is its description (the docs' settings reference is generated from them).
    model_config = SettingsConfigDict(env_prefix="SKILL_EXECUTOR_", extra="ignore", use_attribute_docstrings=True)

    # -- where things live ---------------------------------------------------------
    skills_dirs: PathList = Field(default_factory=lambda: [Path("skills")])
    """Read-only skill roots, in precedence order (never written to)."""
    data_dir: Path = Path("data")
    """Artifacts (SQLite and blobs), run records, workspaces, installed skills, the registry."""
    database_url: str | None = None  # default: sqlite:///<data_dir>/skill-executor.db
    """Where records live: sqlite:///<path> (default: <data_dir>/skill-executor.db) or postgresql://user:pass@host:port/db."""
    workspace_root: Path | None = None  # default: <data_dir>/workspaces
    """Run and session workspaces (default: <data_dir>/workspaces)."""
    skills_refresh_seconds: float = 2.0
    """How stale the skill catalog may get before a background rescan (0: rescan on every read)."""

    object_store: str | None = None  # default: <data_dir>/objects
    """Where artifact versions, skill bundles, environments and session snapshots are stored by
    their SHA-256: a folder, or s3://bucket[/prefix] (default: <data_dir>/objects)."""
    s3_endpoint_url: str | None = None  # default: AWS; credentials from the standard AWS_* variables
    """The S3 API endpoint for an s3:// object store (default: AWS; credentials: the standard AWS variables)."""

    # -- runs ----------------------------------------------------------------------
    runtime: Literal["docker", "bwrap", "local", "agent-sandbox"] = "docker"
    """Where runs execute: docker (sandboxed), bwrap (a bubblewrap sandbox, no Docker needed), agent-sandbox (a pod per
    run) or local (no sandbox; loopback only)."""
    default_timeout: float = 60.0
    """A run's timeout in seconds when the request gives none."""
    max_timeout: float = 900.0
    """The longest timeout a request may ask for, in seconds."""
    stdout_max_bytes: int = 1 * MiB
    """Bytes of stdout kept per run (the rest is cut, and the result says so)."""
    stderr_max_bytes: int = 1 * MiB
    """Bytes of stderr kept per run (the rest is cut, and the result says so)."""
    max_stdin_bytes: int = 4 * MiB
    """The largest stdin a run request may carry."""
    max_command_bytes: int = 128 * 1024 - 1  # the kernel's limit for one argument
    """The longest command (the kernel's limit for one argument)."""
    max_env_vars: int = 256
    """The most environment variables one run request may set."""
    max_env_bytes: int = 1 * MiB
    """The most bytes all of a run's environment variables may take."""
    max_inputs: int = 64
    """The most inputs one run may stage."""
    max_staged_bytes: int = 512 * MiB
    """The most bytes all inputs of one run may stage (a folder counts 4 KiB)."""
    allowed_host_roots: PathList = Field(default_factory=list)
    """Host folders host:// inputs may come from (none: host inputs are refused)."""
    policy_file: Path | None = None
    """A command policy (YAML): allow/deny lists of programs and approval per key and skill (docs: guides/policy.md);
    none: every command may run, without approval. A file that cannot be used stops the service at start."""
    secrets_file: Path | None = None
    """The secrets the egress gateway injects into requests' headers (YAML: name -> value, env:VAR or file:/path;
    docs: guides/egress.md), named by the policy's {secret:NAME}; read once at start, never inside a sandbox, never
    logged. A file that cannot be used, or a policy naming a secret it lacks, stops the service at start."""
    approval_timeout_seconds: float = Field(default=3600.0, gt=0, allow_inf_nan=False)
    """How long a run held for approval (pending_approval) waits before it ends failed with approval_expired."""
    max_pending_approvals: int = Field(default=100, ge=1)
    """The most runs one API key may have held for approval at once (they take no run slot); one more is refused
    (429 too_many_pending_approvals) until one is decided, cancelled or expires."""
    session_ttl_seconds: float = 3600.0
    """Idle time before a session's work (and its agent context) is deleted."""
    session_disk_bytes: int = 1 * GiB  # a session's work/ across its runs
    """The most a session's work/ may hold across its runs."""
    session_snapshots: bool | None = None  # None: on for a cluster's API replicas and workers, off for `serve`
    """Keep each session's work/ in the object store after every run, so another worker can continue it."""
    sessions_per_tenant: int = Field(default=64, gt=0)  # then a new session is refused (429 session_limit)
    """Sessions one tenant (API key) may keep at once; a run that would start another is refused."""
    keep_workspaces: bool = False
    """Keep run workspaces after the run, for debugging."""
    # -- interactive processes (POST /v1/sessions/{session}/processes) --------------------
    process_max_seconds: float = Field(default=3600.0, gt=0)  # a process's wall-clock limit
    """The longest a session's process may live (its wall-clock limit; a start may ask for less)."""
    process_idle_seconds: float = Field(default=600.0, gt=0)  # no stdin and no output this long: killed
    """A process with neither input nor output for this long is killed (a start may ask for less)."""
    process_output_bytes: int = Field(default=1 * MiB, gt=0)  # the ring of a process's output
    """The most output of one process kept to be polled (older bytes are dropped; the total is counted)."""
    processes_per_session: int = Field(default=8, gt=0)  # then a start is refused (429 process_limit)
    """Processes one session may run at once."""
    process_sandboxes_per_key: int = Field(default=4, gt=0)  # then a start in another session: 429 process_limit
    """Sessions of one API key that may have processes at once (each a sandbox as big as a run's, kept while
    its processes live: they take no run slot)."""
    process_sandboxes: int = Field(default=16, gt=0)  # then a start in another session: 429 process_limit
    """Sessions of the whole service that may have processes at once (each a sandbox as big as a run's)."""
    artifact_ttl_seconds: float | None = Field(default=None, gt=0)  # None: artifact versions never expire
    """Artifact versions expire this long after they were saved (none: never)."""

    # -- agent context (GET/POST /v1/sessions/{session}/context; expires with session_ttl_seconds) --
    context_max_tokens: int = Field(default=200_000, gt=0)  # the agent's context window
    """An agent context's window, in tokens."""
    context_skill_tokens: int = Field(default=8_000, gt=0)  # the most one loaded skill may take
    """The most tokens one loaded skill may take."""
    context_doc_tokens: int = Field(default=8_000, gt=0)  # the most one selected doc may take
    """The most tokens one selected doc may take."""
    context_high_water: float = Field(default=0.9, gt=0, le=1)  # loads stop at this share of the maximum
    """The share of the window loads may fill before they stop."""
    context_token_counter: Literal["estimate", "tiktoken-cl100k"] = "estimate"
    """estimate (characters / 4) or tiktoken-cl100k (exact, offline; the tokens extra)."""

    # -- output caps: the most a request may ask for --------------------------------
    max_output_files: int = 1000
    """The most output files a request may ask for."""
    max_output_file_bytes: int = 64 * MiB
    """The largest single output file a request may ask for."""
    max_output_total_bytes: int = 256 * MiB
    """The most bytes of output files a request may ask for."""

    # -- tool results (POST /v1/tools/call, MCP tools/call, ToolExecutor): what a model reads --
    tool_result_max_chars: int = Field(default=100_000, ge=2_000, le=10_000_000)  # ~25,000 tokens
    """Characters of text a tool result gives a model (images apart): 100,000 is about 25,000 tokens, an eighth
    of a 200k-token window; longer stdout/stderr keep head and tail around a marker naming the full copy's ref."""
    tool_result_inline_bytes: int = Field(default=16 * 1024, ge=0, le=4 * MiB)
    """Output files up to this size are inlined in a tool result; larger ones are given by their artifact:// ref."""
    tool_result_image_bytes: int = Field(default=2 * MiB, ge=0, le=16 * MiB)
    """Image outputs (PNG, JPEG, GIF, WebP) up to this many bytes in all are image blocks (MCP, Anthropic)."""

    # -- HTTP service ---------------------------------------------------------------
    host: str = "127.0.0.1"
    """The address serve listens on."""
    port: int = 8080
    """The port serve listens on."""
    api_keys: StrList = Field(default_factory=list)
    """Bearer tokens of tenants (required off loopback)."""
    admin_keys: StrList = Field(default_factory=list)
    """Bearer tokens of admins (act for any tenant, audited; install and publish skills)."""
    api_keys_file: Path | None = None
    """A file of API keys, re-read when it changes."""
    allowed_origins: StrList = Field(default_factory=list)  # browser origins allowed cross-origin (CORS)
    """Browser origins allowed to call the API cross-origin, with CORS; all others are refused."""
    max_request_bytes: int = 64 * MiB
    """The largest request body."""
    max_file_read_bytes: int = 4 * MiB
    """The most bytes of one skill file or doc returned."""
    install_dir: Path | None = None  # default: <data_dir>/skills
    """The install root: where uploaded skills are installed (default: <data_dir>/skills)."""
    # -- skill registry (uploads: POST /v1/skills, POST /v1/skills/{name}/versions) --
    skill_upload_max_bytes: int = 64 * MiB  # one upload (an archive, or all files[] parts together)
    """The most bytes one skill upload may hold (also capped by max_request_bytes)."""
    skill_upload_max_files: int = 2000  # files in one upload
    """The most files one skill upload may hold."""
    skill_upload_strict: bool = False  # spec violations refuse an upload (a request's ?strict= overrides)
    """Spec violations refuse an upload (a request's ?strict= overrides)."""
    skill_refuse_reserved_names: bool = False  # refuse names the hosted platforms reserve ("anthropic", "claude")
    """Refuse skill names holding a word the hosted platforms reserve (anthropic, claude)."""
    log_json: bool = True
    """Log JSON lines (else plain text)."""
    # How long a shutdown (SIGTERM) lets runs in flight finish before cancelling them;
    # under `docker stop`'s 10 s with room for the cancellation and the clean-up.
    shutdown_grace_seconds: float = Field(default=8.0, ge=0)
    """On SIGTERM, how long runs in flight may finish before they are cancelled."""
    # -- MCP over HTTP (/mcp): sessions (skill_executor/mcp/sessions.py) --
    mcp_sessions_per_key: int = Field(default=32, gt=0)  # open MCP sessions one key may hold (429 past it)
    """Open MCP sessions (/mcp) one key may hold (429 mcp_session_limit past it)."""
    mcp_session_idle_seconds: float = Field(default=1800.0, gt=0, allow_inf_nan=False)  # then the session is closed
    """Idle time after which an MCP session is closed."""

    # -- Docker runtime --------------------------------------------------------------
    docker_image: str = "skill-executor/runner:latest"
    """The runner image every run's container starts from (the default Python tier, 3.11)."""
    python_tier_images: dict[str, str] = Field(default_factory=lambda: {"3.13": "skill-executor/runner:python3.13"})
    """The other Python tiers the service offers -> their runner image, as JSON: a skill whose
    requires-python the default tier's Python (3.11) does not meet runs on the oldest that
    meets it ({} offers 3.11 only; agent-sandbox: each tier's pool is AGENT_SANDBOX_POOLS'
    "python<tier>").  Build the image with `skill-executor image build --flavour python3.13`."""
    docker_memory_bytes: int = 1 * GiB
    """Memory limit of one run's container."""
    docker_cpus: float = 1.0
    """CPUs of one run's container."""
    docker_pids_limit: int = 256
    """The most processes and threads in one run's container."""
    docker_user: str = "1000:1000"
    """The uid:gid a run executes as."""
    docker_network_disabled: bool = True
    """Runs get no network (only loopback)."""
    docker_tmpfs_bytes: int = 64 * MiB
    """Size of a container's /tmp (tmpfs)."""
    docker_disk_bytes: int = 1 * GiB
    """The most a run may write to its workspace."""
    disk_cap: Literal["hard", "soft"] = "hard"
    """hard: a file system per workspace (and session's work/) refuses writes past the cap; soft: polled."""
    docker_nofile: int = 1024
    """Open-file limit inside a run."""
    docker_oci_runtime: str | None = None
    """The engine's OCI runtime for every container (runsc: gVisor; default: the engine's)."""
    docker_allow_vsock: bool = False  # AF_VSOCK sockets (not covered by a network namespace)
    """Let runs open AF_VSOCK sockets (a network namespace does not cover vsock)."""
    pool_size: int = 2
    """Warm containers kept started."""
    pool_max_idle_seconds: float = 600.0
    """The longest a warm container stays idle."""
    max_concurrent_runs: int = Field(default_factory=lambda: 2 * max(1, os.cpu_count() or 1))
    """Runs executing at once (default: 2 x the CPU count)."""
    max_queued_runs: int = 64
    """Runs waiting for a slot before new ones are refused (429 busy)."""

    # -- the agent-sandbox runtime (a worker on Kubernetes; docs/guides/runtimes.md) -----------
    agent_sandbox_namespace: str = "default"
    """The namespace of the SandboxWarmPools a worker claims pods from (and of its SandboxClaims)."""
    agent_sandbox_pools: dict[str, str] = Field(default_factory=dict)
    """Image tier -> the SandboxWarmPool its runs claim a pod from, as JSON ({"base": "skill-executor-base"})."""
    agent_sandbox_tier: str = "document"
    """The tier (a key of AGENT_SANDBOX_POOLS) whose pool runs claim their pods from."""
    agent_sandbox_api_url: str | None = None
    """The Kubernetes API's URL (default: the in-cluster service account's; e.g. kubectl proxy's)."""
    agent_sandbox_claim_timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    """How long a run waits for a pod of its pool (an exhausted pool: 503 runtime_unavailable after it)."""
    agent_sandbox_claim_waiters_max: int = Field(default=64, ge=0)
    """Runs of one worker waiting for a pod at once; one more is refused 429 queue_full."""
    agent_sandbox_claim_ttl_margin_seconds: float = Field(default=120.0, gt=0)
    """A claim's TTL is the run's timeout plus this: the controller deletes a claim its worker never released."""
    agent_sandbox_rest_port: int = Field(default=8080, gt=0, lt=65536)
    """The port of the pods' REST files API (sandboxd's default)."""
    agent_sandbox_grpc_port: int = Field(default=9090, gt=0, lt=65536)
    """The port of the pods' gRPC ProcessService (sandboxd's default)."""
    agent_sandbox_kill_grace_seconds: float = Field(default=2.0, gt=0)
    """After SIGKILL to a run's process group, how long its stream may take to end before it is dropped."""

    # -- a cluster (serve --role api, skill-executor worker; Postgres only) -----------------
    worker_capacity: int | None = Field(default=None, ge=1)
    """Runs a worker executes at once (default: SKILL_EXECUTOR_MAX_CONCURRENT_RUNS)."""
    worker_heartbeat_seconds: float = Field(default=5.0, gt=0)
    """How often a worker renews its lease."""
    worker_lease_seconds: float = Field(default=20.0, gt=0)
    """A worker's lease: not renewed for this long, it is lost (its running runs end interrupted)."""
    worker_poll_seconds: float = Field(default=5.0, gt=0)
    """How often a worker looks at the queue besides being told of new runs (notifications can be lost)."""
    worker_sweep_seconds: float = Field(default=5.0, gt=0)
    """How often API replicas look for lost workers (a loss shows within lease + sweep)."""
    worker_url: str | None = None
    """The URL API replicas reach this worker at, for its sessions' processes (default: ``http://<host>:<port>``
    of its own server, the machine's host name for 0.0.0.0; set it when that is not what replicas reach)."""
    cluster_secret: str | None = Field(default=None, repr=False)
    """The shared secret of calls between a cluster's replicas and workers (default: one made once and kept in
    the database, which every process of the cluster reads)."""
    queue_timeout_seconds: float = Field(default=600.0, gt=0)
    """A cluster's run waiting for a worker this long (since it was queued) ends failed ``queue_timeout``."""
    instance_id: str | None = None  # this process's lease name under the workspace root (default: random)
    """This process's lease name under the workspace root (default: random)."""
    cleanup_workers: int = 4  # parallel removals of used containers and workspaces
    """Parallel removals of used containers and workspaces."""

    # -- skill dependencies (resolved on the host into <data_dir>/envs, never in a run) ----
    skill_deps: Literal["install", "off"] = "install"
    """install: resolve skills' declared dependencies into <data_dir>/envs; off: never."""
    bundle_deps: Literal["image", "install"] = "image"
    """What an inline bundle (a run request's own skill) may need: ``image``: only what the runner image provides (a
    bundle declaring more is refused: any key may send one, and resolving makes the host fetch packages); ``install``:
    resolved like an installed skill's."""
    skill_deps_from_docs: bool = False
    """true: the packages ``pip install`` lines of a skill's SKILL.md name (its shell blocks) are dependencies too,
    resolved like declared ones (many published skills declare theirs only so); ``skills doctor`` reports them either
    way."""
    package_index_url: str | None = Field(default=None, repr=False)  # default: PyPI (pip's own config is ignored)
    """The Python package index skills' needs are resolved from (default: PyPI; pip's own configuration is ignored).
    It may hold a token (``user:token@``, a path segment, the query): it is recorded and shown as its scheme and
    host only, everywhere (manifests runs read, answers, logs, errors)."""
    wheelhouse: Path | None = None  # a folder of wheels: resolve from it alone (pip --no-index --find-links)
    """A folder of wheels: resolve Python needs from it alone (offline)."""
    npm_registry: str | None = Field(default=None, repr=False)  # default: registry.npmjs.org (npmrc files ignored)
    """The npm registry skills' needs are resolved from (default: registry.npmjs.org; npmrc files are ignored); shown
    as its scheme and host only, like the package index."""
    npm_wheelhouse: Path | None = None  # a folder of npm tarballs (*.tgz): resolve from it alone (npm --offline)
    """A folder of npm tarballs (*.tgz): resolve npm needs from it alone (offline)."""
    host_tools_user: str = "nobody"
    """When the service runs as root, pip and npm run as this user ('root': as the service itself)."""
    host_tools_python: str | None = None
    """The Python (CPython 3.8+ with pip) that runs pip for dependency resolution (default: the service's own)."""

    # -- the egress gateway (skill_executor/egress; docs/guides/egress.md) ------------------------
    egress_python: str | None = None
    """The Python whose environment has mitmproxy (the egress extra; requirements/egress-lock.txt), which runs the
    egress gateway process (default: the service's own)."""
    egress_ca_bundle: Path | None = None
    """A PEM file of CA certificates the gateway trusts for upstreams besides the system bundle (private CAs, tests)."""
    egress_hosts: dict[str, str] = Field(default_factory=dict)
    """Name -> address or address:port, as JSON: where the gateway connects for that name, instead of resolving it
    (split horizon, tests); the addresses given here are trusted even when private."""
    egress_scan_bytes: int = 8 * 1024 * 1024
    """The largest request body the gateway checks for secrets toward a host that is not theirs (a larger one is
    refused while the run holds secrets)."""
    egress_restarts: int = Field(default=5, ge=0, le=100)
    """How many times in a row the service starts its egress gateway again when the process dies (pauses of
    0.2 s, doubling, up to 10 s); after that runs under a rule with egress are refused (egress_unavailable)."""
    egress_listen: str | None = None
    """Where the egress gateway listens for TCP, as host:port (0.0.0.0:3128): for sandboxes that reach it over
    the network (agent-sandbox pods; a NetworkPolicy lets only them in). Default: a free loopback port."""
    egress_advertise: str | None = None
    """The address:port agent-sandbox pods put in their proxy URL to reach this worker's gateway (its pod IP and
    the port of SKILL_EXECUTOR_EGRESS_LISTEN, e.g. $(POD_IP):3128); without it such runs are refused."""
    egress_ask_timeout_seconds: float = Field(default=120.0, gt=0, allow_inf_nan=False)
    """How long a request to a host outside its rule's allow-list waits for approval (a rule with ask: true) before
    it is refused (403); the run waits with it, within its own timeout."""
    egress_max_pending_asks: int = Field(default=20, ge=1)
    """The most hosts one API key's runs may have waiting for approval at once (ask: true); one more is refused at
    once (403) until one is decided or expires."""

    @field_validator("api_keys", "admin_keys", "allowed_origins", mode="before")
    @classmethod
    def _strs(cls, value: Any) -> Any:
        return _split_list(value)

    @field_validator("skills_dirs", "allowed_host_roots", mode="before")
    @classmethod
    def _paths(cls, value: Any) -> Any:
        return _split_list(value)

    @field_validator("agent_sandbox_pools")
    @classmethod
    def _pools(cls, value: dict[str, str]) -> dict[str, str]:
        for tier, pool in value.items():
            if not tier or not _DNS_1123.fullmatch(pool):
                raise ValueError(
                    f"SKILL_EXECUTOR_AGENT_SANDBOX_POOLS: {tier[:40]!r} -> {pool[:80]!r} is not a tier -> pool name "
                    "(a DNS-1123 name: a-z 0-9 -, at most 253)"
                )
        return value

    @field_validator("python_tier_images")
    @classmethod
    def _tiers(cls, value: dict[str, str]) -> dict[str, str]:
        for tier, image in value.items():
            if tier not in PYTHON_TIER_NAMES:
                raise ValueError(
                    f"SKILL_EXECUTOR_PYTHON_TIER_IMAGES: {tier[:40]!r} is not a Python tier besides the default "
                    f"(one of: {', '.join(PYTHON_TIER_NAMES)})"
                )
            if not image.strip():
                raise ValueError(f"SKILL_EXECUTOR_PYTHON_TIER_IMAGES: the {tier} tier's image is empty")
        return value

    @field_validator("object_store")
    @classmethod
    def _object_store(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not value.strip():
            raise ValueError("SKILL_EXECUTOR_OBJECT_STORE is empty: unset it, or give a folder or s3://bucket[/prefix]")
        if "://" not in value:
            return value
        match = _S3_URL.fullmatch(value)
        if match is None:
            raise ValueError(
                f"SKILL_EXECUTOR_OBJECT_STORE: {value[:100]!r} is neither a folder nor s3://bucket[/prefix]"
            )
        bucket = match["bucket"]
        if not _S3_BUCKET.fullmatch(bucket) or ".." in bucket:
            raise ValueError(
                f"SKILL_EXECUTOR_OBJECT_STORE: invalid S3 bucket name {bucket[:80]!r} (3 to 63 of a-z 0-9 . -)"
            )
        return value

    @field_validator("s3_endpoint_url")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"https?://[^/?#@\s]+/?", value):
            raise ValueError("SKILL_EXECUTOR_S3_ENDPOINT_URL must be http(s)://host[:port]")
        return value

    @property
    def object_store_location(self) -> ObjectStoreLocation:
        """The parsed ``object_store``: an S3 bucket and prefix, or a folder."""
        value = self.object_store
        match = _S3_URL.fullmatch(value) if value is not None else None
        if match is not None:
            return ObjectStoreLocation(self.data_dir / "objects", match["bucket"], (match["prefix"] or "").strip("/"))
        return ObjectStoreLocation(Path(value) if value is not None else self.data_dir / "objects")

    @property
    def workspaces(self) -> Path:
        return self.workspace_root or self.data_dir / "workspaces"

    @property
    def database(self) -> str:
        """The database URL in effect (the embedded SQLite file unless ``database_url`` is set)."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / EMBEDDED_DATABASE).resolve()}"

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
