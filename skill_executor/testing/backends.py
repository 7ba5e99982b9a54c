"""Where test cases run: this machine's sandbox (:class:`LocalBackend`) or a running
service (:class:`ServerBackend`). Both run a *snapshot* of the skill folder, so an edit
made while the tests run does not mix two versions.

A backend that cannot do its job raises :class:`InfrastructureError` (the CLI's exit 3);
a request the sandbox refuses is an ordinary :class:`~skill_executor.errors.ExecutorError`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

import httpx
from skill_executor_client import ApiError, Client

from ..access import LOCAL, LOCAL_TENANT
from ..config import Settings
from ..core import Executor
from ..errors import ExecutorError, Unavailable
from ..runs.models import RunRequest, RunResult
from ..skills.loader import SkillLoadError, find_skill_file, load_skill
from .publish import Publish, PublishRefused

#: Folders never copied into a snapshot.
SNAPSHOT_IGNORE = shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".venv")
T = TypeVar("T")


def default_data_dir() -> Path:
    """``SKILL_EXECUTOR_DATA_DIR``, else ``$XDG_CACHE_HOME/skill-executor/test`` (``~/.cache``):
    dependency environments survive between test runs; a service's registry never sees the
    snapshots."""
    if os.environ.get("SKILL_EXECUTOR_DATA_DIR"):
        return Path(os.environ["SKILL_EXECUTOR_DATA_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "skill-executor" / "test"


class InfrastructureError(ExecutorError):
    """The engine, the image or the service is not there: nothing about the skill is known."""

    status = 503

    def __init__(self, message: str, code: str = "infrastructure_unavailable") -> None:
        super().__init__(message, code=code)


class Backend(Protocol):
    #: what the report says about where the cases ran
    description: str
    sandboxed: bool

    def prepare(self, skill_dir: Path) -> str:
        """Make the folder's current content runnable; return the reference to run it by
        (``name`` or ``name@version``)."""
        ...

    def run(self, request: RunRequest) -> RunResult: ...

    def end_session(self, session: str) -> None:
        """The session's cases are done: drop its ``work/`` (where the backend can)."""
        ...

    def close(self) -> None: ...


class LocalBackend:
    """This machine's engine (or the unsandboxed local runtime), through an :class:`Executor`
    whose only skill root is a private folder of snapshots."""

    def __init__(self, settings: Settings) -> None:
        self._tmp = Path(tempfile.mkdtemp(prefix="skill-tests-"))
        self._count = 0
        self._lock = threading.Lock()
        settings = settings.model_copy(update={"skills_dirs": [self._tmp], "skills_refresh_seconds": 0.0})
        self.sandboxed = settings.runtime == "docker"
        self.description = (
            f"docker ({settings.docker_image}"
            f"{', ' + settings.docker_oci_runtime if settings.docker_oci_runtime else ''})"
            if self.sandboxed
            else "local (NOT sandboxed)"
        )
        try:
            if self.sandboxed:
                _check_engine(settings.docker_image)
            self._executor = Executor.from_settings(settings)
        except InfrastructureError:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise
        except Unavailable as exc:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise InfrastructureError(exc.message, exc.code) from None

    def prepare(self, skill_dir: Path) -> str:
        with self._lock:
            self._count += 1
            target = self._tmp / str(self._count) / Path(skill_dir).resolve().name
        shutil.copytree(skill_dir, target, symlinks=True, ignore=SNAPSHOT_IGNORE)
        catalog = self._executor.repository.reload()
        for skill in catalog.skills:
            if Path(skill.path).resolve() == target.resolve():
                return skill.id
        for rejected in catalog.rejected:
            if Path(rejected.path).resolve() == target.resolve():
                problems = "; ".join(f"{d.code}: {d.message}" for d in rejected.diagnostics)
                raise ExecutorError(f"the skill does not load: {problems}", code="skill_invalid")
        raise ExecutorError(
            "the skill does not load (its name collides with another skill under test?)", code="skill_invalid"
        )

    def run(self, request: RunRequest) -> RunResult:
        try:
            return self._executor.runs().run(request, principal=LOCAL)
        except ExecutorError as exc:  # a run's error comes back as the code and status it had
            if exc.status == Unavailable.status:
                raise InfrastructureError(exc.message, exc.code) from None
            raise

    def end_session(self, session: str) -> None:
        self._executor.runner.sessions.end(session, LOCAL_TENANT)

    def close(self) -> None:
        try:
            self._executor.close()
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)


def _check_engine(image: str) -> None:
    """Fail now, with the fix, rather than once per case."""
    import docker

    from ..runtimes.docker.engine import connect

    try:
        client = connect(timeout=30)
    except Unavailable as exc:
        raise InfrastructureError(f"{exc.message} (start dockerd, or set DOCKER_HOST)", "engine_unavailable") from None
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise InfrastructureError(
            f"the runner image {image} is not on this engine: build it with "
            "`skill-executor image build` (or set SKILL_EXECUTOR_DOCKER_IMAGE)",
            "image_missing",
        ) from None
    except docker.errors.DockerException as exc:
        raise InfrastructureError(f"the Docker engine failed: {exc}", "engine_error") from None
    finally:
        client.close()


class ServerBackend:
    """A running service. A test run changes nothing on it unless asked (``publish``):

    * None (the default): nothing is uploaded, so a skill folder cannot be tested there
      (``publish_not_allowed``);
    * ``existing``: each folder is uploaded as a new version of a skill the service already
      has, never made the default -- the default is read before and after, and a move is an
      error (``default_moved``; put back when it moved to this upload). A skill the service
      does not have, or has without a default, is refused (``skill_not_on_server``): the
      service would make the upload its live default;
    * ``any``: a new skill is uploaded too, and goes live (the service makes a new skill's
      first version its default) -- for a staging service, never for a pull request's CI.

    Cases run pinned to the uploaded version (``name@N``)."""

    sandboxed = True

    def __init__(
        self, url: str, *, api_key: str | None = None, timeout: float = 900.0, publish: Publish | None = None
    ) -> None:
        self.description = f"server {url}"
        self.publish = publish
        self._client = Client(url, api_key=api_key, timeout=timeout)
        self._call(self._client.health)

    def prepare(self, skill_dir: Path) -> str:
        if find_skill_file(skill_dir) is None:
            raise ExecutorError(f"{skill_dir} has no SKILL.md", code="skill_invalid")
        if self.publish is None:
            raise PublishRefused(
                "testing a skill folder on a service uploads it there, and this run may not "
                "upload: pass --publish existing (a new version of a skill the service has, never "
                "its default)",
                code="publish_not_allowed",
            )
        try:
            skill = load_skill(skill_dir)
        except SkillLoadError as exc:
            raise ExecutorError(f"the skill does not load: {exc}", code="skill_invalid") from None
        before = self._default_of(skill.id)
        if before is None and self.publish != "any":
            raise PublishRefused(
                f"the service has no skill {skill.id!r} with a default version: uploading it would "
                "make this folder the live default; test it locally, or pass --publish any (a "
                "staging service only)",
                code="skill_not_on_server",
            )
        if before is None:
            pushed = self._call(lambda: self._client.push_skill(skill_dir, set_default=False))
            return f"{pushed.id}@{pushed.version}"
        pushed = self._call(lambda: self._client.push_skill(skill_dir, name=skill.id, set_default=False))
        after = self._default_of(skill.id)
        if after != before:
            restored = ""
            if after == pushed.version:
                self._call(lambda: self._client.set_default_version(skill.id, before))
                restored = f"; it was set back to {before}"
            raise PublishRefused(
                f"the default version of {skill.id!r} moved from {before} to {after} while this "
                f"run uploaded version {pushed.version} as not-default{restored}; check the "
                "service's audit log",
                code="default_moved",
            )
        return f"{pushed.id}@{pushed.version}"

    def _default_of(self, skill_id: str) -> int | None:
        """The skill's default version on the service; None when it has no such skill or no default."""
        try:
            versions = self._call(lambda: self._client.skill_versions(skill_id))
        except ExecutorError as exc:
            if exc.code in ("skill_not_found", "version_not_found", "not_found"):
                return None
            raise
        return versions.default_version

    def run(self, request: RunRequest) -> RunResult:
        answer = self._call(lambda: self._client.run(request.model_dump(mode="json", by_alias=True, exclude_none=True)))
        return RunResult.model_validate(answer.model_dump(mode="json", by_alias=True, exclude_unset=True))

    def _call(self, action: Callable[[], T]) -> T:
        try:
            return action()
        except ApiError as exc:
            if exc.status >= 500 or exc.status in (401, 403):
                raise InfrastructureError(f"the service answered {exc}", exc.code) from None
            raise ExecutorError(exc.message, code=exc.code, details=exc.details) from None
        except httpx.HTTPError as exc:
            raise InfrastructureError(f"cannot reach the service: {exc}", "server_unreachable") from None

    def end_session(self, session: str) -> None:
        """The service has no call to end a session: it expires with the service's session TTL."""

    def close(self) -> None:
        self._client.close()
