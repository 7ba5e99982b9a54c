"""The pytest plugin (entry point ``pytest11: skill_executor``; ``-p skill_executor``
loads it where autoloading is off).

* ``pytest skills/`` collects every skill's ``tests/skill-tests.yaml``: one item per case
  (plus ``validate``), run in the sandbox with pytest's reporting.
* Fixtures: ``skill_executor`` (session-scoped: this machine's engine, or the service
  of ``--skill-executor-server URL``) and ``skill_run``::

      def test_report(skill_run):
          result = skill_run("skills/csv-report", "python3 scripts/report.py assets/sample.csv out/")
          assert result.exit_code == 0
          assert result.file("out/summary.json").json()["rows"] == 5

The engine and the image are only touched when an item or a fixture needs them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ..errors import ExecutorError
from .format import TEST_FILE_NAMES, Case
from .loader import SkillTests, TestFileError, load_skill_tests
from .logtext import Caps, for_log, inert
from .publish import PUBLISH_MODES, Publish

_STATE = pytest.StashKey["SkillExecutor"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("skill_executor", "skill-executor: skill tests in the sandbox")
    group.addoption(
        "--skill-executor-server",
        metavar="URL",
        default=None,
        help="run skills on this service instead of the local Docker engine",
    )
    group.addoption(
        "--skill-executor-runtime",
        choices=("docker", "local"),
        default=None,
        help="docker (default) or local (NOT sandboxed)",
    )
    group.addoption("--skill-executor-image", default=None, help="the runner image to use locally")
    group.addoption(
        "--skill-executor-strict",
        action="store_true",
        default=False,
        help="spec violations in SKILL.md fail the skill's validate item",
    )
    group.addoption(
        "--skill-executor-update-golden",
        action="store_true",
        default=False,
        help="rewrite equals_file golden files from the current outputs",
    )
    group.addoption(
        "--skill-executor-publish",
        choices=PUBLISH_MODES,
        default=None,
        help="with a server: what may be uploaded (existing: a new version of a skill the service has, "
        "never its default; any: new skills too, which go live). Default: nothing",
    )
    # No ini options for the server or publishing: a pull request controls the repository's
    # pytest.ini/tox.ini/pyproject.toml, and must not be able to send its skill to a service.


def pytest_configure(config: pytest.Config) -> None:
    server = config.getoption("--skill-executor-server") or None
    publish = config.getoption("--skill-executor-publish") or None
    if publish is not None and publish not in PUBLISH_MODES:
        raise pytest.UsageError(f"skill_executor_publish must be one of {', '.join(PUBLISH_MODES)}")
    config.stash[_STATE] = SkillExecutor(
        server=server,
        publish=publish,
        runtime=config.getoption("--skill-executor-runtime") or "docker",
        image=config.getoption("--skill-executor-image"),
        strict=bool(config.getoption("--skill-executor-strict")),
        update_golden=bool(config.getoption("--skill-executor-update-golden")),
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is not None:
        state.close()


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.name in TEST_FILE_NAMES and file_path.parent.name == "tests":
        skill_dir = file_path.parent.parent
        if (skill_dir / "SKILL.md").is_file() or (skill_dir / "skill.md").is_file():
            return SkillTestFile.from_parent(parent, path=file_path)
    return None


class SkillExecutor:
    """The session's sandbox: created at first use, closed when pytest ends."""

    def __init__(
        self,
        *,
        server: str | None = None,
        runtime: str = "docker",
        image: str | None = None,
        strict: bool = False,
        update_golden: bool = False,
        publish: Publish | None = None,
    ) -> None:
        self.server, self.runtime, self.image, self.publish = server, runtime, image, publish
        self.strict, self.update_golden = strict, update_golden
        self.token = secrets.token_hex(4)
        self._backend: Any = None
        self._refs: dict[Path, str] = {}
        self._lock = threading.Lock()

    @property
    def backend(self) -> Any:
        with self._lock:
            if self._backend is None:
                from .backends import LocalBackend, ServerBackend

                if self.server:
                    self._backend = ServerBackend(
                        self.server, publish=self.publish, api_key=os.environ.get("SKILL_EXECUTOR_API_KEY") or None
                    )
                else:
                    from ..config import Settings
                    from .backends import default_data_dir

                    overrides: dict[str, Any] = {
                        "runtime": self.runtime,
                        "pool_size": 0,
                        "data_dir": default_data_dir(),
                    }
                    if self.image:
                        overrides["docker_image"] = self.image
                    self._backend = LocalBackend(Settings(**overrides))
            return self._backend

    def ref(self, skill: str | os.PathLike[str]) -> str:
        """What to run: a skill folder is snapshotted once per session; a plain name runs
        the service's (``--skill-executor-server``) skill of that name."""
        path = Path(skill)
        if path.is_dir():
            key = path.resolve()
            backend = self.backend
            with self._lock:
                known = self._refs.get(key)
            if known is None:
                known = backend.prepare(key)
                with self._lock:
                    self._refs[key] = known
            return known
        if self.server:
            return str(skill)
        raise ExecutorError(
            f"{skill!r} is not a skill folder (locally, give the folder that holds SKILL.md)", code="skill_not_found"
        )

    def run(self, skill: str | os.PathLike[str], command: str | None = None, **request: Any) -> SkillRunResult:
        """Run ``command`` (or a whole ``skill_run`` request's fields) in the skill; returns
        the result with helpers. ``out/**`` comes back, binary files too, unless
        ``outputs``/``output_files`` say otherwise."""
        from ..runs.models import RunRequest

        fields = dict(request)
        if command is not None:
            fields["command"] = command
        if "outputs" not in fields and "output_files" not in fields:
            fields["outputs"] = {"globs": ["out/**"], "inline": True, "inline_binary": True}
        fields["skill"] = self.ref(skill)
        return SkillRunResult(self.backend.run(RunRequest.model_validate(fields)).model_dump())

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None


class ResultFile:
    def __init__(self, data: dict[str, Any]) -> None:
        self.name: str = data["name"]
        self.mime_type: str = data["mime_type"]
        self.size: int = data["size_bytes"]
        self.sha256: str | None = data.get("sha256")
        self.truncated: bool = bool(data.get("truncated"))
        self._data = data

    def bytes(self) -> bytes:
        content = self._data.get("content")
        if content is None or self.truncated:
            raise ValueError(f"{self.name}: the content was not brought back (truncated or not inlined)")
        return content.encode() if self._data.get("encoding") == "utf-8" else base64.b64decode(content)

    def text(self) -> str:
        return self.bytes().decode("utf-8")

    def json(self) -> Any:
        return json.loads(self.text())

    def __repr__(self) -> str:
        return f"<ResultFile {self.name} {self.mime_type} {self.size} bytes>"


class SkillRunResult:
    """A run's result (the ``skill_run`` answer's fields as attributes) with file helpers."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.files = [ResultFile(item) for item in data.get("output_files", [])]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["data"][name]
        except KeyError:
            raise AttributeError(name) from None

    def file(self, name: str) -> ResultFile:
        wanted = name[2:] if name.startswith("./") else name
        for item in self.files:
            if item.name == wanted:
                return item
        raise KeyError(f"no output file {name!r}; the run brought back: {[f.name for f in self.files] or 'none'}")

    def __repr__(self) -> str:
        return f"<SkillRunResult exit_code={self.data.get('exit_code')} files={[f.name for f in self.files]}>"


@pytest.fixture(scope="session")
def skill_executor(request: pytest.FixtureRequest) -> SkillExecutor:
    state: SkillExecutor = request.config.stash[_STATE]
    return state


@pytest.fixture
def skill_run(skill_executor: SkillExecutor) -> Callable[..., SkillRunResult]:
    return skill_executor.run


class SkillTestFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        skill_dir = self.path.parent.parent
        try:
            tests = load_skill_tests(skill_dir, test_file=self.path)
        except TestFileError as exc:
            raise self.CollectError(for_log(exc.message, Caps())) from None
        yield ValidateItem.from_parent(self, name="validate", tests=tests)
        assert tests.tests is not None
        for case in tests.tests.cases:  # pytest prints item names in the CI log
            yield SkillCaseItem.from_parent(self, name=inert(case.name), tests=tests, case=case)


class _SkillItem(pytest.Item):
    def __init__(self, *, tests: SkillTests, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tests = tests

    @property
    def state(self) -> SkillExecutor:
        return self.config.stash[_STATE]

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        caps = Caps()
        if isinstance(excinfo.value, SkillCaseFailed):
            from .report import describe

            outcome = excinfo.value.outcome
            headline = outcome.failures[0].message if outcome.failures else outcome.message or outcome.status
            return f"{for_log(headline, caps)}\n{describe(outcome, caps)}"
        if isinstance(excinfo.value, ExecutorError):
            return f"{excinfo.value.code}: {for_log(excinfo.value.message, caps)}"
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"{self.parent.name if self.parent else ''}::{self.name}"


class SkillCaseFailed(Exception):
    def __init__(self, outcome: Any) -> None:
        super().__init__(outcome.id)
        self.outcome = outcome


class ValidateItem(_SkillItem):
    def runtest(self) -> None:
        from .runner import validate

        _, outcome = validate(self.tests, strict=self.state.strict)
        if outcome.status != "passed":
            raise SkillCaseFailed(outcome)


class SkillCaseItem(_SkillItem):
    def __init__(self, *, case: Case, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case

    def runtest(self) -> None:
        from .runner import Job, Options, run_case

        state = self.state
        ref = state.ref(self.tests.skill_dir)
        skill_key = hashlib.sha256(str(self.tests.skill_dir.resolve()).encode()).hexdigest()[:8]
        session = f"skill-tests-{state.token}-{skill_key}-{self.case.session}" if self.case.session else None
        job = Job(self.tests, ref.split("@", 1)[0], ref, [self.case], session, str(self.path))
        outcome = run_case(job, self.case, state.backend, Options(update_golden=state.update_golden))
        if outcome.infrastructure:
            raise ExecutorError(outcome.message or "infrastructure unavailable", code="infrastructure_unavailable")
        if outcome.status != "passed":
            raise SkillCaseFailed(outcome)
