"""The Docker runtime: every run in its own fresh, hardened, network-less container.

Per run: create -> attach -> start -> wait (deadline) -> inspect -> remove.  The
container is always removed: after a normal exit, a timeout, an error, and (through
the start-up sweep and the deadline reaper) after a crash of the service.

Isolation, each a setting (:class:`~executor.config.Settings`):

* no network (``network_disabled``: the container gets only ``lo``; or ``network_mode=none``);
* the run's workspace bind-mounted read-write at ``/workspace``, its skill read-only at
  ``/workspace/.skill``, a session's ``work/`` at ``/workspace/work``; nothing else of the host;
* non-root user, all capabilities dropped, ``no-new-privileges``, read-only root file
  system with a size-capped tmpfs ``/tmp``;
* memory limit with no swap, CPU quota, pids limit, ``nofile`` and ``fsize`` ulimits;
* an init process (``tini``) as PID 1, so signals reach the command and zombies are reaped.

stdout/stderr are read from the attach stream into bounded buffers; the log driver is
off, so even a flood never lands on the host disk.  The disk cap is enforced twice:
the ``fsize`` ulimit stops any single file at the cap, and a monitor measures what the
run has added to its workspace and kills the container when the total passes the cap.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import selectors
import signal as signals
import socket
import threading
import time
from pathlib import Path, PurePosixPath
from typing import Any

import docker
from docker.errors import APIError, DockerException, NotFound
from docker.types import LogConfig, Mount, Ulimit

from ..activity import Activity
from ..config import Settings
from ..errors import Unavailable
from ..owners import owner_alive, owner_token
from ..skills import Skill
from ..workspace.fs import MAX_DEPTH, MAX_ENTRIES, Tree, remove_tree
from ..workspace.layout import (
    RUN_LINKS,
    SKILL_SOURCE,
    Workspace,
    WorkspaceManager,
    add_run_links,
    build_view,
    shadowed,
)
from .base import ExecResult, ExecSpec, RuntimePaths
from .pool import SOCKET, WarmContainer, WarmPool
from .skillcopy import copy_skill
from .streams import BoundedBuffer, Demux, recv_loop

log = logging.getLogger(__name__)

LABEL = "io.skill-executor"
LABEL_MANAGED = f"{LABEL}.managed"
LABEL_INSTANCE = f"{LABEL}.instance"
LABEL_OWNER = f"{LABEL}.owner"
LABEL_RUN = f"{LABEL}.run"
LABEL_DEADLINE = f"{LABEL}.deadline"
CONTAINER_WORKSPACE = "/workspace"
STDIN_FILE = ".stdin"
#: Seconds between two measurements of a run's disk use.
DISK_POLL_SECONDS = 0.2
#: Extra seconds past a container's deadline before the reaper removes it.
REAPER_GRACE_SECONDS = 30.0
LAUNCHER = "/opt/skill-executor/launcher"
#: Longest that housekeeping (container removal, pool refill) waits for a quiet moment.
HOUSEKEEPING_MAX_WAIT = 2.0
RUN_LINK_NAMES = frozenset(RUN_LINKS)


def connect(timeout: float = 60) -> docker.DockerClient:
    """A client for the local engine with API version negotiation."""
    try:
        client = docker.DockerClient(base_url=os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"),
                                     version="auto", timeout=timeout)
        client.ping()
        return client
    except DockerException as exc:
        raise Unavailable(f"the Docker engine is not reachable: {exc}", code="engine_unavailable") from None


class DockerRuntime:
    name = "docker"
    #: Where a run sees the skills (for the overview's ``<location>``).
    visible_skills_dir = f"{CONTAINER_WORKSPACE}/skills"

    def __init__(self, settings: Settings, client: docker.DockerClient | None = None) -> None:
        self.settings = settings
        self.client = client or connect()
        self.owner = _parse_user(settings.docker_user)
        self.instance = settings.instance_id or hashlib.sha256(
            f"{socket.gethostname()}:{settings.workspaces.resolve()}".encode()
        ).hexdigest()[:12]
        self.token = owner_token()
        self.activity = Activity()
        self._check_image()
        self.sweep()
        self._closed = threading.Event()
        self._reaper = threading.Thread(target=self._reap_loop, name="docker-reaper", daemon=True)
        self._reaper.start()
        self._trash: queue.Queue[tuple[str, Path | None] | None] = queue.Queue()
        self._janitor = threading.Thread(target=self._clean_loop, name="docker-janitor", daemon=True)
        self._janitor.start()
        self._warm: dict[str, WarmContainer] = {}
        self._warm_lock = threading.Lock()
        self._running: dict[str, str] = {}  # run id -> container id, while a run executes
        self.pool: WarmPool | None = None

    def container_of(self, run_id: str) -> str | None:
        """The container executing ``run_id`` right now (warm containers carry no run label)."""
        with self._warm_lock:
            return self._running.get(run_id)

    def start_pool(self, workspaces: WorkspaceManager) -> None:
        """Start keeping ``pool_size`` warm containers (no-op for size 0)."""
        if self.settings.pool_size > 0 and self.pool is None:
            self.pool = WarmPool(self, workspaces, self.settings.pool_size, self.settings.pool_max_idle_seconds)

    # -- lifecycle -------------------------------------------------------------------------

    def _check_image(self) -> None:
        try:
            self.client.images.get(self.settings.docker_image)
        except NotFound:
            raise Unavailable(
                f"the runner image {self.settings.docker_image!r} is missing; build it with "
                "'skill-executor image build'",
                code="image_missing",
            ) from None

    def sweep(self) -> int:
        """Remove containers left by dead processes of this host (a crashed service)."""
        removed = 0
        for container in self._managed():
            if not owner_alive(container["Labels"].get(LABEL_OWNER, "")):
                removed += self._remove(container["Id"])
        return removed

    def reap(self, now: float | None = None) -> int:
        """Remove containers of any owner that are past their deadline."""
        now = time.time() if now is None else now
        removed = 0
        for container in self._managed():
            try:
                deadline = float(container["Labels"].get(LABEL_DEADLINE, "inf"))
            except ValueError:
                deadline = 0.0
            if now > deadline + REAPER_GRACE_SECONDS:
                removed += self._remove(container["Id"])
        return removed

    def _managed(self) -> list[dict[str, Any]]:
        """Every container this project created (any instance), as list entries."""
        try:
            return self.client.api.containers(all=True, filters={"label": f"{LABEL_MANAGED}=1"})
        except DockerException as exc:
            log.warning("listing containers failed: %s", exc)
            return []

    def _reap_loop(self) -> None:
        while not self._closed.wait(30.0):
            try:
                self.reap()
            except Exception as exc:  # the reaper must never die
                log.warning("reaper: %s", exc)

    def _remove(self, container_id: str) -> int:
        try:
            self.client.api.remove_container(container_id, force=True, v=True)
            return 1
        except NotFound:
            return 0
        except APIError as exc:
            if exc.status_code == 409:  # removal already in progress
                return 0
            log.warning("removing container %s failed: %s", container_id[:12], exc)
            return 0

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        self._closed.set()
        self._trash.put(None)
        self._janitor.join(timeout=60)

    def discard(self, container_id: str, root: Path | None = None, *, wait: bool = False) -> None:
        """Kill and remove a container (and a workspace folder) off the caller's path."""
        if wait or self._closed.is_set():
            self._remove(container_id)
            if root is not None:
                remove_tree(root)
        else:
            self._trash.put((container_id, root))

    def _clean_loop(self) -> None:
        while True:
            item = self._trash.get()
            if item is None:
                break
            self.activity.wait_quiet(HOUSEKEEPING_MAX_WAIT)
            container_id, root = item
            self._remove(container_id)
            if root is not None:
                remove_tree(root)
        while True:  # drain what was queued before the stop
            try:
                item = self._trash.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                self._remove(item[0])
                if item[1] is not None:
                    remove_tree(item[1])

    def health(self) -> dict[str, tuple[bool, str]]:
        """Engine reachable and runner image present."""
        checks: dict[str, tuple[bool, str]] = {}
        try:
            version = self.client.version()
            checks["engine"] = (True, f"Docker {version.get('Version')} (API {version.get('ApiVersion')})")
        except DockerException as exc:
            return {"engine": (False, f"engine unreachable: {exc}"), "image": (False, "unknown")}
        try:
            image = self.client.images.get(self.settings.docker_image)
            checks["image"] = (True, f"{self.settings.docker_image} ({image.short_id})")
        except NotFound:
            checks["image"] = (False, f"{self.settings.docker_image} is missing")
        except DockerException as exc:
            checks["image"] = (False, str(exc))
        return checks

    def containers_alive(self) -> int:
        try:
            return len(self.client.api.containers(filters={"label": f"{LABEL_OWNER}={self.token}"}))
        except DockerException:
            return 0

    # -- runtime interface -------------------------------------------------------------------

    def create_workspace(
        self,
        manager: WorkspaceManager,
        run_id: str,
        skill_id: str,
        *,
        session_work: Path | None,
        session: str | None,
        tenant: str,
    ) -> Workspace:
        """A warm container's workspace when one is ready (not for sessions), else a new one."""
        warm = self.pool.acquire() if self.pool is not None and session_work is None else None
        if warm is None:
            return manager.create(
                run_id, skill_id, session_work=session_work, session=session, owner=self.owner, tenant=tenant
            )
        workspace = manager.adopt(warm.root, run_id, skill_id, tenant)
        with self._warm_lock:
            self._warm[run_id] = warm
        return workspace

    def paths(self, workspace: Workspace) -> RuntimePaths:
        return RuntimePaths(CONTAINER_WORKSPACE)

    def prepare(self, workspace: Workspace, skill: Skill) -> list[str]:
        with self._warm_lock:
            warm = workspace.run_id in self._warm
        if warm:
            # The container is already running: the skill goes straight into the
            # workspace as its SKILL_DIR, files and folders owned by root and not
            # writable by the run's user (hard links where that user cannot write the
            # source), plus the out/work/inputs links.
            view = workspace.skill_view
            view.mkdir()
            warnings = copy_skill(skill.path, view, link_unless_writable_by=self.owner, skip_top=RUN_LINK_NAMES)
            add_run_links(view)
            return warnings + shadowed(os.listdir(skill.path))
        entries = sorted(e for e in os.listdir(skill.path) if e not in (".git", "__pycache__"))
        return build_view(workspace, entries)

    def cleanup(self, workspace: Workspace) -> None:
        with self._warm_lock:
            warm = self._warm.pop(workspace.run_id, None)
        if warm is not None:
            self.discard(warm.id)

    def hardened_config(
        self, *, command: list[str], cwd: str, env: dict[str, str], mounts: list[Mount], labels: dict[str, str]
    ) -> dict[str, Any]:
        """Low-level create-container parameters with every isolation setting, for both paths."""
        s = self.settings
        host_config = self.client.api.create_host_config(
            mounts=mounts,
            read_only=True,
            tmpfs={"/tmp": f"rw,nosuid,nodev,size={s.docker_tmpfs_bytes},mode=1777"},
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            mem_limit=s.docker_memory_bytes,
            memswap_limit=s.docker_memory_bytes,
            nano_cpus=int(s.docker_cpus * 1e9),
            pids_limit=s.docker_pids_limit,
            ulimits=[
                Ulimit(name="nofile", soft=s.docker_nofile, hard=s.docker_nofile),
                Ulimit(name="fsize", soft=s.docker_disk_bytes, hard=s.docker_disk_bytes),
            ],
            init=True,
            log_config=LogConfig(type="none", config={}),
            network_mode=None if s.docker_network_disabled else "none",
            runtime=s.docker_oci_runtime,
        )
        return {
            "image": s.docker_image,
            "command": command,
            "user": s.docker_user,
            "working_dir": cwd,
            "environment": env,
            "labels": {LABEL_MANAGED: "1", LABEL_INSTANCE: self.instance, LABEL_OWNER: self.token, **labels},
            "network_disabled": s.docker_network_disabled,
            "stdin_open": False,
            "tty": False,
            "detach": True,
            "host_config": host_config,
        }

    def container_config(self, spec: ExecSpec) -> dict[str, Any]:
        """The container of one run (cold path)."""
        ws = spec.workspace
        mounts = [
            Mount(CONTAINER_WORKSPACE, str(ws.root), type="bind", read_only=False),
            Mount(f"{CONTAINER_WORKSPACE}/{SKILL_SOURCE}", str(spec.skill.path.resolve()), type="bind", read_only=True),
        ]
        if ws.work != ws.root / "work":
            mounts.append(Mount(f"{CONTAINER_WORKSPACE}/work", str(ws.work), type="bind", read_only=False))
        command = ["bash", "-c", spec.command]
        if spec.stdin is not None:
            # A constant wrapper: the command and the file travel as arguments, never spliced.
            command = ["bash", "-c", 'exec bash -c "$0" < "$1"', spec.command, f"{CONTAINER_WORKSPACE}/run/{STDIN_FILE}"]
        return self.hardened_config(
            command=command,
            cwd=spec.cwd,
            env=spec.env,
            mounts=mounts,
            labels={LABEL_RUN: spec.run_id, LABEL_DEADLINE: f"{time.time() + spec.timeout:.0f}"},
        )

    def start_warm(self, root: Path) -> str:
        """Create and start a pool container on an empty workspace; return its id."""
        deadline = time.time() + self.settings.pool_max_idle_seconds + self.settings.max_timeout
        config = self.hardened_config(
            command=[LAUNCHER, "--container", f"{CONTAINER_WORKSPACE}/{SOCKET}"],
            cwd=CONTAINER_WORKSPACE,
            env={},
            mounts=[Mount(CONTAINER_WORKSPACE, str(root), type="bind", read_only=False)],
            labels={LABEL_RUN: "warm", LABEL_DEADLINE: f"{deadline:.0f}"},
        )
        container_id = self.client.api.create_container(**config)["Id"]
        try:
            self.client.api.start(container_id)
        except DockerException:
            self._remove(container_id)
            raise
        return container_id

    def execute(self, spec: ExecSpec) -> ExecResult:
        if spec.stdin is not None:
            with spec.workspace.tree("run") as run_dir:
                run_dir.write(PurePosixPath(STDIN_FILE), spec.stdin, owner=None, mode=0o444, what="the run's stdin")
        baseline = _disk_usage(_usage_roots(spec.workspace))
        with self._warm_lock:
            warm = self._warm.get(spec.run_id)
        if warm is not None:
            with self._warm_lock:
                self._running[spec.run_id] = warm.id
            try:
                return self._execute_warm(warm, spec, baseline)
            finally:
                with self._warm_lock:
                    self._running.pop(spec.run_id, None)
        started = time.monotonic()
        try:
            container_id = self.client.api.create_container(**self.container_config(spec))["Id"]
        except DockerException as exc:
            raise Unavailable(f"could not create the run's container: {exc}", code="engine_error") from None
        with self._warm_lock:
            self._running[spec.run_id] = container_id
        try:
            return self._supervise(container_id, spec, started, baseline)
        finally:
            with self._warm_lock:
                self._running.pop(spec.run_id, None)
            self._remove(container_id)

    def _supervise(self, container_id: str, spec: ExecSpec, started: float, baseline: int) -> ExecResult:
        api = self.client.api
        out, err = BoundedBuffer(spec.stdout_max), BoundedBuffer(spec.stderr_max)
        sock = api.attach_socket(container_id, params={"stdout": 1, "stderr": 1, "stream": 1, "logs": 0})
        raw = getattr(sock, "_sock", sock)
        # Docker's stream multiplexing: 8-byte headers, [stream, 0, 0, 0, size (big-endian)].
        demux = Demux(8, _attach_header, {1: ("stdout", out), 2: ("stderr", err)}, spec.listener)
        done = threading.Event()

        def pump() -> None:
            try:
                recv_loop(raw, demux)
            finally:
                done.set()

        reader = threading.Thread(target=pump, name="attach-reader", daemon=True)
        reader.start()
        try:
            api.start(container_id)
        except DockerException as exc:
            _close(raw)
            raise Unavailable(f"could not start the run's container: {exc}", code="engine_error") from None

        timed_out, cancelled, disk_hit = self._watch(done, spec, started, baseline, lambda: _kill(api, container_id))
        status = _wait(api, container_id)
        duration_ms = int((time.monotonic() - started) * 1000)
        reader.join(timeout=2.0)
        _close(raw)
        code: int | None = status
        oom = False
        if code is None or code == 128 + signals.SIGKILL:
            # Only a SIGKILL can be the OOM killer's; ask the engine then (one call saved otherwise).
            state = api.inspect_container(container_id)["State"]
            oom = bool(state.get("OOMKilled"))
            code = code if code is not None else state.get("ExitCode")
        disk_hit = disk_hit or self._reached_cap(spec, baseline, code)
        sig = _signal_name(code)
        warnings = self._disk_warning(disk_hit)
        return ExecResult(
            exit_code=code,
            stdout=out.data,
            stderr=err.data,
            duration_ms=duration_ms,
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
            timed_out=timed_out,
            cancelled=cancelled,
            signal=sig,
            oom_killed=oom,
            disk_limit_hit=disk_hit,
            warnings=warnings,
        )

    def _watch(
        self, done: threading.Event, spec: ExecSpec, started: float, baseline: int, kill: Any
    ) -> tuple[bool, bool, bool]:
        """Wait for the run to end; kill it at the deadline, on cancel, or past the disk cap."""
        guard = _Guard(spec, started, baseline, self.settings.docker_disk_bytes)
        while not done.wait(timeout=guard.wait_time()):
            if guard.breached():
                kill()
                break
        return guard.timed_out, guard.cancelled, guard.disk_hit

    def _reached_cap(self, spec: ExecSpec, baseline: int, code: int | None) -> bool:
        """A file stopped at the fsize cap, or the run reached a cap as it ended."""
        return code == 128 + signals.SIGXFSZ or _over_cap(spec, baseline, self.settings.docker_disk_bytes)

    def _disk_warning(self, disk_hit: bool) -> list[str]:
        if not disk_hit:
            return []
        limit = self.settings.docker_disk_bytes
        return [
            f"the run reached a disk cap (the run's {limit} bytes, its session's work/, more than "
            f"{MAX_ENTRIES} files, or folders nested deeper than {MAX_DEPTH}): writes past it failed or the "
            "run was stopped"
        ]

    def _execute_warm(self, warm: WarmContainer, spec: ExecSpec, baseline: int) -> ExecResult:
        """Run the command through the launcher of a warm container.

        One thread does it all: send the request, read output frames as they come,
        and watch the deadline, cancellation and the disk cap in between.
        """
        started = time.monotonic()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            _connect_unix(conn, spec.workspace.root / SOCKET)
            stdin = f"{CONTAINER_WORKSPACE}/run/{STDIN_FILE}" if spec.stdin is not None else ""
            conn.sendall(_launcher_request(spec.command, spec.cwd, stdin, spec.env))
        except OSError as exc:
            conn.close()
            raise Unavailable(f"the warm container's launcher is unreachable: {exc}", code="engine_error") from None
        frames = _LauncherFrames(spec)
        buffer = bytearray(256 * 1024)
        view = memoryview(buffer)
        guard = _Guard(spec, started, baseline, self.settings.docker_disk_bytes)
        killed = False
        with conn, selectors.DefaultSelector() as selector:
            selector.register(conn, selectors.EVENT_READ)
            eof_deadline = float("inf")
            while frames.exit is None:
                if time.monotonic() >= eof_deadline:
                    break  # killed, but the stream did not close: stop waiting
                wait = guard.wait_time() if not killed else max(0.0, eof_deadline - time.monotonic())
                if selector.select(timeout=wait):
                    try:
                        count = conn.recv_into(buffer)
                    except OSError:
                        count = 0
                    if not count:
                        break
                    frames.demux.feed(view[:count])
                # Checked on every pass: a command that floods its output keeps the socket
                # readable, and must still meet its deadline.
                if not killed and guard.breached():
                    _kill(self.client.api, warm.id)
                    killed = True
                    eof_deadline = time.monotonic() + 5.0
        timed_out, cancelled, disk_hit = guard.timed_out, guard.cancelled, guard.disk_hit
        duration_ms = int((time.monotonic() - started) * 1000)
        warnings = []
        if frames.exit is None and not killed:
            _kill(self.client.api, warm.id)  # the launcher is gone: make sure nothing of the run survives
        oom = bool(_oom_kills(warm.id))
        if frames.exit is not None:
            code: int | None = frames.exit.get("exit_code")
        elif killed or oom:
            code = 128 + signals.SIGKILL
        else:
            code = None
            warnings.append("the run's launcher ended without reporting an exit status")
        disk_hit = disk_hit or self._reached_cap(spec, baseline, code)
        return ExecResult(
            exit_code=code,
            stdout=frames.out.data,
            stderr=frames.err.data,
            duration_ms=duration_ms,
            stdout_truncated=frames.out.truncated,
            stderr_truncated=frames.err.truncated,
            timed_out=timed_out,
            cancelled=cancelled,
            signal=_signal_name(code),
            oom_killed=oom,
            disk_limit_hit=disk_hit,
            warnings=warnings + self._disk_warning(disk_hit),
        )


class _Guard:
    """The limits a run is held to while it executes: deadline, cancellation, disk cap."""

    def __init__(self, spec: ExecSpec, started: float, baseline: int, limit: int) -> None:
        self.spec = spec
        self.deadline = started + spec.timeout
        self.baseline = baseline
        self.limit = limit
        self.next_disk = started + DISK_POLL_SECONDS
        self.timed_out = self.cancelled = self.disk_hit = False

    def wait_time(self) -> float:
        """Seconds until the next check is due."""
        wait = min(self.deadline, self.next_disk) - time.monotonic()
        if self.spec.cancel is not None:
            wait = min(wait, 0.05)
        return max(0.0, wait)

    def breached(self) -> bool:
        now = time.monotonic()
        if now >= self.deadline:
            self.timed_out = True
        elif self.spec.cancel is not None and self.spec.cancel.is_set():
            self.cancelled = True
        elif now >= self.next_disk:
            self.disk_hit = _over_cap(self.spec, self.baseline, self.limit)
            # A measurement walks the run's files: space them so it costs at most a fifth of a core.
            done = time.monotonic()
            self.next_disk = done + max(DISK_POLL_SECONDS, 4 * (done - now))
        return self.timed_out or self.cancelled or self.disk_hit


def _usage_roots(workspace: Workspace) -> list[Path]:
    """Folders whose growth counts against the disk cap (a session's work is elsewhere)."""
    roots = [workspace.root]
    if workspace.root not in workspace.work.parents:
        roots.append(workspace.work)
    return roots


def _over_cap(spec: ExecSpec, baseline: int, limit: int) -> bool:
    """The run grew its folders by ``limit`` or more, filled its session's ``work/``
    to the session's cap, or nested folders deeper than can be measured."""
    workspace = spec.workspace
    total = 0
    for root in _usage_roots(workspace):
        with Tree(root) as tree:
            used, too_deep = tree.usage()
        if too_deep:
            return True
        if spec.session_disk_max is not None and root == workspace.work and used >= spec.session_disk_max:
            return True
        total += used
    return total - baseline >= limit


class _LauncherFrames:
    """The launcher's frames: 1 byte kind (O, E, X) + 4 bytes length + payload."""

    def __init__(self, spec: ExecSpec) -> None:
        self.out, self.err = BoundedBuffer(spec.stdout_max), BoundedBuffer(spec.stderr_max)
        self.exit: dict[str, Any] | None = None
        self.demux = Demux(
            5,
            lambda h: (h[0], int.from_bytes(h[1:5], "big")),
            {ord("O"): ("stdout", self.out), ord("E"): ("stderr", self.err)},
            spec.listener,
            self._control,
        )

    def _control(self, stream: int, payload: bytes) -> None:
        if stream == ord("X"):
            self.exit = json.loads(payload)


def _launcher_request(command: str, cwd: str, stdin: str, env: dict[str, str]) -> bytes:
    """u32 count, then (u32 length, bytes) fields: command, cwd, stdin path, NAME=value..."""
    fields = [command, cwd, stdin, *(f"{name}={value}" for name, value in env.items())]
    encoded = [field.encode() for field in fields]
    parts = [len(encoded).to_bytes(4, "big")]
    for field in encoded:
        parts += [len(field).to_bytes(4, "big"), field]
    return b"".join(parts)


def _attach_header(header: bytes) -> tuple[int, int]:
    return header[0], int.from_bytes(header[4:8], "big")


def _connect_unix(conn: socket.socket, path: Path) -> None:
    """Connect to a Unix socket at any depth (paths are limited to 108 bytes)."""
    if len(os.fsencode(path)) < 100:
        conn.connect(str(path))
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        conn.connect(f"/proc/self/fd/{fd}/{path.name}")
    finally:
        os.close(fd)


def _signal_name(code: int | None) -> str | None:
    """The signal behind an exit status of 128+N, if N is one."""
    if code is None or not 128 < code < 128 + 65:
        return None
    try:
        return signals.Signals(code - 128).name
    except ValueError:
        return None


def _oom_kills(container_id: str) -> int | None:
    """OOM kills in the container's memory cgroup (v1 or v2), read from the host."""
    candidates = [
        (Path(f"/sys/fs/cgroup/memory/docker/{container_id}/memory.oom_control"), "oom_kill "),
        (Path(f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/memory.events"), "oom_kill "),
    ]
    for path, key in candidates:
        try:
            for line in path.read_text().splitlines():
                if line.startswith(key):
                    return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return None


def _kill(api: Any, container_id: str) -> None:
    try:
        api.kill(container_id, signal="SIGKILL")
    except DockerException:
        pass


def _wait(api: Any, container_id: str) -> int | None:
    try:
        return int(api.wait(container_id, timeout=30)["StatusCode"])
    except Exception:
        _kill(api, container_id)
        return None


def _close(raw: Any) -> None:
    try:
        raw.close()
    except OSError:
        pass


def _disk_usage(roots: list[Path]) -> int:
    """Bytes allocated under ``roots`` (links not followed, hard links counted once per root)."""
    total = 0
    for root in dict.fromkeys(roots):
        with Tree(root) as tree:
            total += tree.usage()[0]
    return total


def _parse_user(user: str) -> tuple[int, int]:
    uid, _, gid = user.partition(":")
    return int(uid), int(gid or uid)
