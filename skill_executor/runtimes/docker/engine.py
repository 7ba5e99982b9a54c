"""The Docker engine as the runtime uses it: a thin layer over docker-py's low-level API.

One place builds the hardened container configuration (for per-run and warm
containers alike), one place talks to the engine (create, start, attach, kill, wait,
remove, list), and one place maps the engine's errors to the service's
(``engine_unavailable``, ``engine_error``, ``image_missing``).

Isolation of every container, each a setting (:class:`~skill_executor.config.Settings`):

* no network (``network_disabled``: the container gets only ``lo``; or ``network_mode=none``);
* non-root user, all capabilities dropped, ``no-new-privileges``, read-only root file
  system with a size-capped tmpfs ``/tmp``;
* memory limit with no swap, CPU quota, pids limit, ``nofile`` and ``fsize`` ulimits;
* an init process (``tini``) as PID 1, so signals reach the command and zombies are reaped;
* a read-only ``/etc/hosts`` naming ``localhost`` (without a network the engine's own is
  empty, and programs that serve or call ``localhost`` fail to resolve it);
* the log driver off, so even an output flood never lands on the host disk.

The engine's OCI runtime (``docker_oci_runtime``, e.g. gVisor's ``runsc``) is checked at
start-up against what the engine has registered (:mod:`.oci`); a container seen from the
host (its init's pidfd, its cgroups) is :mod:`.hostview`.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, DockerException, NotFound
from docker.types import LogConfig, Mount, Ulimit
from requests.exceptions import RequestException

from ...config import Settings
from ...errors import Unavailable
from ...image.inputs import DEFAULT_TIER, PythonTier
from .oci import OciRuntime, check_oci_runtime

log = logging.getLogger(__name__)

#: What an engine call raises when the engine misbehaves or is away: docker-py's own
#: errors, and the transport's (an unreachable socket surfaces as ``requests``' errors).
ENGINE_ERRORS: tuple[type[Exception], ...] = (DockerException, RequestException)

LABEL = "io.skill-executor"
LABEL_MANAGED = f"{LABEL}.managed"
LABEL_OWNER = f"{LABEL}.owner"
#: The identity of the workspace root (its device and inode) whose service made a container:
#: two data dirs never share one, a copy of a data dir (and its lease root id) neither.
LABEL_ROOT = f"{LABEL}.root"
LABEL_RUN = f"{LABEL}.run"
LABEL_DEADLINE = f"{LABEL}.deadline"
CONTAINER_WORKSPACE = "/workspace"
#: Removals of a container tried at once when it exited while the engine killed it.
REMOVE_ATTEMPTS = 3
#: The containers' /etc/hosts (loopback only: there is no other network).
HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
LAUNCHER = "/opt/skill-executor/launcher"
#: Where every container sees the skills' dependency environments (``<data_dir>/envs``, read-only).
CONTAINER_ENVS = "/opt/skill-envs"
#: Host tasks per process of a run under gVisor's ptrace platform (a stub per process,
#: tracer threads in the sandbox; ~12 measured): there the pids limit is enforced in the
#: sandbox (``nproc``), and the host cgroup caps the sandbox as a whole at this multiple.
#: At 16 a fork bomb held at ``nproc`` left the sentry itself without host tasks about
#: half the time (the sandbox ended with no exit status, or stalled the engine for a minute).
GVISOR_HOST_TASKS_PER_PID = 32


def connect(timeout: float = 60) -> docker.DockerClient:
    """A client for the local engine with API version negotiation."""
    try:
        client = docker.DockerClient(
            base_url=os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"), version="auto", timeout=timeout
        )
        client.ping()
        return client
    except ENGINE_ERRORS as exc:
        raise unreachable(exc) from None


def unreachable(exc: BaseException) -> Unavailable:
    return Unavailable(f"the Docker engine is not reachable: {exc}", code="engine_unavailable")


def launcher_argv(settings: Settings, mode: str) -> list[str]:
    """The launcher with its mode (``--exec`` or ``--container``) and the vsock setting."""
    return [LAUNCHER, *(["--allow-vsock"] if settings.docker_allow_vsock else []), mode]


def write_hosts(path: Path) -> Path:
    """Write the containers' hosts file at ``path`` (atomically: instances may share it)."""
    if not (path.is_file() and not path.is_symlink() and path.read_text() == HOSTS):
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(HOSTS)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    return path


def parse_user(user: str) -> tuple[int, int]:
    uid, _, gid = user.partition(":")
    return int(uid), int(gid or uid)


class Engine:
    """Containers of one service process: made hardened, labelled with its owner token."""

    def __init__(
        self, settings: Settings, client: docker.DockerClient, token: str, hosts_file: Path, root: str = ""
    ) -> None:
        self.settings = settings
        self.client = client
        self.api = client.api
        self.token = token
        #: The workspace root's identity (LABEL_ROOT): only containers of this root are this instance's.
        self.root = root
        self.oci_runtime: OciRuntime | None = None
        self.hosts_file = write_hosts(hosts_file)
        self.envs_dir = settings.envs_dir
        self.envs_dir.mkdir(parents=True, exist_ok=True)
        #: The Python tiers' images found present (an image is not removed under a service).
        self._tier_images: set[str] = set()

    @property
    def gvisor(self) -> bool:
        return self.oci_runtime is not None and self.oci_runtime.gvisor

    # -- configuration -------------------------------------------------------------------

    def config(
        self,
        *,
        command: list[str],
        cwd: str,
        env: dict[str, str],
        mounts: list[Mount],
        labels: dict[str, str],
        image: str | None = None,
        network_of: str | None = None,
    ) -> dict[str, Any]:
        """Low-level create-container parameters with every isolation setting (``image``:
        a Python tier's, :meth:`image_for`; default: the runner image; ``network_of``: a
        container whose (network-less) namespace this one joins, to reach its loopback)."""
        s = self.settings
        host_config = self.api.create_host_config(
            mounts=[
                *mounts,
                Mount("/etc/hosts", str(self.hosts_file), type="bind", read_only=True),
                Mount(CONTAINER_ENVS, str(self.envs_dir), type="bind", read_only=True),
            ],
            read_only=True,
            tmpfs={"/tmp": f"rw,nosuid,nodev,size={s.docker_tmpfs_bytes},mode=1777"},
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            mem_limit=s.docker_memory_bytes,
            memswap_limit=s.docker_memory_bytes,
            nano_cpus=int(s.docker_cpus * 1e9),
            pids_limit=s.docker_pids_limit * (GVISOR_HOST_TASKS_PER_PID if self.gvisor else 1),
            ulimits=[
                Ulimit(name="nofile", soft=s.docker_nofile, hard=s.docker_nofile),
                Ulimit(name="fsize", soft=s.docker_disk_bytes, hard=s.docker_disk_bytes),
                # gVisor counts the run's own processes against nproc (runc would count the host user's).
                *([Ulimit(name="nproc", soft=s.docker_pids_limit, hard=s.docker_pids_limit)] if self.gvisor else []),
            ],
            init=True,
            log_config=LogConfig(type="none", config={}),
            network_mode=f"container:{network_of}"
            if network_of is not None
            else (None if s.docker_network_disabled else "none"),
            runtime=s.docker_oci_runtime,
        )
        return {
            "image": image or s.docker_image,
            "command": command,
            "user": s.docker_user,
            "working_dir": cwd,
            "environment": env,
            "labels": {
                LABEL_MANAGED: "1",
                LABEL_OWNER: self.token,
                **({LABEL_ROOT: self.root} if self.root else {}),
                **labels,
            },
            "network_disabled": s.docker_network_disabled and network_of is None,
            "stdin_open": False,
            "tty": False,
            "detach": True,
            "host_config": host_config,
        }

    # -- operations ----------------------------------------------------------------------

    def create(self, config: dict[str, Any]) -> str:
        try:
            return str(self.api.create_container(**config)["Id"])
        except ENGINE_ERRORS as exc:
            raise Unavailable(f"could not create the run's container: {exc}", code="engine_error") from None

    def start(self, container_id: str) -> None:
        try:
            self.api.start(container_id)
        except ENGINE_ERRORS as exc:
            raise Unavailable(f"could not start the run's container: {exc}", code="engine_error") from None

    def attach(self, container_id: str) -> socket.socket:
        """The raw stdout/stderr attach stream (Docker's 8-byte frame headers)."""
        try:
            sock = self.api.attach_socket(container_id, params={"stdout": 1, "stderr": 1, "stream": 1, "logs": 0})
        except ENGINE_ERRORS as exc:
            raise Unavailable(f"could not attach to the run's container: {exc}", code="engine_error") from None
        return getattr(sock, "_sock", sock)  # type: ignore[no-any-return]

    def kill(self, container_id: str) -> None:
        try:
            self.api.kill(container_id, signal="SIGKILL")
        except ENGINE_ERRORS:
            pass  # already gone, or the engine is away: removal retries later

    def wait(self, container_id: str, timeout: float = 30) -> int | None:
        """The exit status, or None (the container is then killed)."""
        try:
            return int(self.api.wait(container_id, timeout=timeout)["StatusCode"])
        except Exception:
            self.kill(container_id)
            return None

    def state(self, container_id: str) -> dict[str, Any]:
        try:
            return dict(self.api.inspect_container(container_id)["State"])
        except ENGINE_ERRORS:
            return {}

    def remove(self, container_id: str, *, strict: bool = False) -> int:
        """Kill and remove; 1 when this call removed it.  A failure raises ``Unavailable``
        when ``strict``; otherwise the container is left to the reconciliation.

        A container that exits while the engine kills it for the removal makes the engine
        answer "Could not kill running container ... is not running" (Docker 20.10): it is
        removed again at once, now that it is not running."""
        for attempt in range(REMOVE_ATTEMPTS):
            try:
                self.api.remove_container(container_id, force=True, v=True)
                return 1
            except NotFound:
                return 0
            except APIError as exc:
                if exc.status_code == 409:  # removal already in progress
                    return 0
                problem = Unavailable(f"removing container {container_id[:12]} failed: {exc}", code="engine_error")
                if "is not running" in str(exc.explanation or "") and attempt + 1 < REMOVE_ATTEMPTS:
                    time.sleep(0.05)
                    continue
            except ENGINE_ERRORS as exc:
                problem = unreachable(exc)
            break
        if strict:
            raise problem
        log.debug("%s (left to the reconciliation)", problem.message)
        return 0

    def managed(self) -> list[dict[str, Any]]:
        """Every container this project created (any owner), as list entries."""
        try:
            return list(self.api.containers(all=True, filters={"label": f"{LABEL_MANAGED}=1"}))
        except ENGINE_ERRORS as exc:
            raise unreachable(exc) from None

    def own(self) -> list[dict[str, Any]]:
        """Every container of this instance (any state), as list entries: its owner token and
        its root's identity (a copy of the data dir, whose lease files and instance id are the
        same, is another root)."""
        try:
            listed = self.api.containers(all=True, filters={"label": f"{LABEL_OWNER}={self.token}"})
            # one without the root label is an older version's: its token alone decides, as before
            return [c for c in listed if (c.get("Labels") or {}).get(LABEL_ROOT, self.root) == self.root]
        except ENGINE_ERRORS as exc:
            raise unreachable(exc) from None

    def by_state(self) -> dict[str, int]:
        """This instance's containers by state (running, exited, created, removing, dead, ...)."""
        counts: dict[str, int] = {}
        for container in self.own():
            state = str(container.get("State") or "unknown")
            counts[state] = counts.get(state, 0) + 1
        return counts

    def image_for(self, python: PythonTier) -> str:
        """The runner image of a Python tier: the configured image for the default tier, the
        tier's from SKILL_EXECUTOR_PYTHON_TIER_IMAGES for another (checked once present);
        503 ``image_missing`` / ``python_tier_unavailable`` naming what to do otherwise."""
        if python == DEFAULT_TIER:
            return self.settings.docker_image
        image = self.settings.python_tier_images.get(python.name)
        if image is None:
            raise Unavailable(
                f"this service offers no Python {python.name} sandboxes (SKILL_EXECUTOR_PYTHON_TIER_IMAGES)",
                code="python_tier_unavailable",
            )
        if image not in self._tier_images:
            try:
                self.client.images.get(image)
            except NotFound:
                raise Unavailable(
                    f"the Python {python.name} runner image {image!r} is missing; build it with "
                    f"'skill-executor image build --flavour {python.flavour}'",
                    code="image_missing",
                ) from None
            except ENGINE_ERRORS as exc:
                raise unreachable(exc) from None
            self._tier_images.add(image)
        return image

    def check_image(self) -> None:
        try:
            self.client.images.get(self.settings.docker_image)
        except NotFound:
            raise Unavailable(
                f"the runner image {self.settings.docker_image!r} is missing; build it with "
                "'skill-executor image build'",
                code="image_missing",
            ) from None
        except ENGINE_ERRORS as exc:
            raise unreachable(exc) from None

    def check_oci_runtime(self) -> None:
        """The configured OCI runtime is registered with the engine (and usable as configured)."""
        try:
            info = self.client.info()
        except ENGINE_ERRORS as exc:
            raise unreachable(exc) from None
        self.oci_runtime = check_oci_runtime(self.settings.docker_oci_runtime, info, pool=self.settings.pool_size > 0)

    def oom_killed(self, container_id: str, *, timeout: float = 30.0) -> bool:
        """The engine's word on an OOM kill of the whole (ended) container: under gVisor
        the OOM killer takes the sandbox, whose memory is the run's, and its cgroup with it."""
        try:
            # A loaded engine can take a while to reap a killed sandbox: wait generously
            # (this path is taken only when the run ended without its launcher's exit frame).
            self.api.wait(container_id, timeout=timeout)
            return bool(self.api.inspect_container(container_id)["State"].get("OOMKilled"))
        except Exception as exc:
            log.warning("could not tell whether container %s was killed for memory: %s", container_id[:12], exc)
            return False

    def health(self) -> dict[str, tuple[bool, str]]:
        """Engine reachable, runner image present, OCI runtime registered."""
        checks: dict[str, tuple[bool, str]] = {}
        try:
            version = self.client.version()
            checks["engine"] = (True, f"Docker {version.get('Version')} (API {version.get('ApiVersion')})")
        except ENGINE_ERRORS as exc:
            return {"engine": (False, f"engine unreachable: {exc}"), "image": (False, "unknown")}
        try:
            image = self.client.images.get(self.settings.docker_image)
            checks["image"] = (True, f"{self.settings.docker_image} ({image.short_id})")
        except NotFound:
            checks["image"] = (False, f"{self.settings.docker_image} is missing")
        except ENGINE_ERRORS as exc:
            checks["image"] = (False, str(exc))
        if self.settings.python_tier_images:
            found: list[str] = []
            missing: list[str] = []
            for name, ref in sorted(self.settings.python_tier_images.items()):
                try:
                    found.append(f"{name}: {ref} ({self.client.images.get(ref).short_id})")
                except NotFound:
                    missing.append(f"{name}: {ref} is missing (skill-executor image build --flavour python{name})")
                except ENGINE_ERRORS as exc:
                    missing.append(f"{name}: {exc}")
            # Degraded, not down: the default image serves every other skill (a readiness probe
            # must not take the service out for one tier); that tier's runs get 503 image_missing.
            checks["python_tiers"] = (True, "; ".join([*missing, *found]))
        try:
            runtime = check_oci_runtime(
                self.settings.docker_oci_runtime, self.client.info(), pool=self.settings.pool_size > 0
            )
            checks["oci_runtime"] = (True, runtime.describe())
        except Unavailable as exc:
            checks["oci_runtime"] = (False, exc.message)
        except ENGINE_ERRORS as exc:
            checks["oci_runtime"] = (False, str(exc))
        return checks
