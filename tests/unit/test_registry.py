"""The skill registry: immutable versions, digests, pinning, rollback, leases, audit, push from CI."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from skill_executor_client import ApiError, AsyncClient, Client
from skill_executor_client.typed import Typed
from skill_executor.core import Executor
from skill_executor.db import Database
from skill_executor.errors import Conflict, NotFound
from skill_executor.registry import SkillRepository
from skill_executor.registry.store import Registry, manifest_digest
from skill_executor.runs.models import RunRequest

from ..api_server import Server
from ..conftest import REPO, make_settings


def write_skill(folder: Path, name: str, data: str = "one", *, description: str = "A versioned skill.") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n---\n# {name}\n")
    (folder / "data.txt").write_text(data)
    (folder / "scripts").mkdir(exist_ok=True)
    (folder / "scripts" / "show.sh").write_text("cat data.txt\n")
    return folder


def skill_zip(name: str, data: str, *, top: str | None = None) -> bytes:
    buffer = io.BytesIO()
    top = name if top is None else top
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(f"{top}/SKILL.md", f"---\nname: {name}\ndescription: A versioned skill.\n---\n# {name}\n")
        archive.writestr(f"{top}/data.txt", data)
    return buffer.getvalue()


def another_process(database: Database) -> Database:
    """A second engine on ``database``: what another process (or machine) would have."""
    return Database(database.url.render_as_string(hide_password=False))


def blob_count(registry: Registry) -> int:
    return sum(1 for sub in registry.blobs.iterdir() if sub.is_dir() for _ in sub.iterdir())


# -- the digest --------------------------------------------------------------------------


def test_a_fixed_tree_has_a_known_digest(tmp_path: Path, database: Database) -> None:
    """The canonical encoding (docs/concepts/versions.md): ``path NUL sha256-hex LF`` per file, by path bytes."""
    tree = tmp_path / "fixed"
    (tree / "scripts").mkdir(parents=True)
    (tree / "SKILL.md").write_bytes(b"---\nname: fixed\ndescription: Fixed.\n---\nbody\n")
    (tree / "scripts" / "run.py").write_bytes(b"print('hi')\n")
    (tree / "a b.txt").write_bytes(b"")
    registry = Registry(tmp_path / "registry", database=database)
    version, created = registry.publish("fixed", tree, actor="test")
    assert created and version.number == 1
    encoded = b"".join(
        path.encode() + b"\x00" + hashlib.sha256((tree / path).read_bytes()).hexdigest().encode() + b"\n"
        for path in sorted(["SKILL.md", "a b.txt", "scripts/run.py"], key=str.encode)
    )
    assert version.digest == "sha256:" + hashlib.sha256(encoded).hexdigest()
    # the same on every machine: a constant, not a recomputation
    assert version.digest == KNOWN_DIGEST
    assert manifest_digest([(f.path, f.sha256) for f in version.files]) == KNOWN_DIGEST


#: computed with coreutils: for f in SKILL.md "a b.txt" scripts/run.py; do printf '%s\0%s\n' "$f" "$(sha256sum "$f" | cut -d" " -f1)"; done | sha256sum
KNOWN_DIGEST = "sha256:731010a10202709eed65b406df69768cae944bd9954b4bd4abe25e27d39fdee7"


def test_links_stay_links_and_count_in_the_digest(tmp_path: Path, database: Database) -> None:
    (tmp_path / "outside.txt").write_text("outside")
    skill = write_skill(tmp_path / "src" / "linked", "linked")
    (skill / "alias.txt").symlink_to("data.txt")
    (skill / "tools").symlink_to("scripts")
    (skill / "escape").symlink_to(tmp_path / "outside.txt")
    registry = Registry(tmp_path / "registry", database=database)
    version, _ = registry.publish("linked", skill, actor="test")
    folder = registry.folder(version)
    assert os.readlink(folder / "alias.txt") == "data.txt" and (folder / "alias.txt").read_text() == "one"
    assert os.readlink(folder / "tools") == "scripts"
    assert os.readlink(folder / "escape") == str(tmp_path / "outside.txt")
    links = {f.path: f.link for f in version.files if f.link is not None}
    assert links == {"alias.txt": "data.txt", "tools": "scripts", "escape": str(tmp_path / "outside.txt")}
    line = b"alias.txt\x00link:" + hashlib.sha256(b"data.txt").hexdigest().encode() + b"\n"
    assert version.digest == manifest_digest([(f.path, f.digest_field) for f in version.files])
    assert line in b"".join(f.path.encode() + b"\x00" + f.digest_field.encode() + b"\n" for f in version.files)
    (skill / "alias.txt").unlink()
    (skill / "alias.txt").symlink_to("SKILL.md")  # retargeted: another version
    assert registry.publish("linked", skill, actor="test")[0].number == 2


# -- the registry on its own -------------------------------------------------------------


def test_versions_survive_a_restart_and_identical_content_is_stored_once(tmp_path: Path, database: Database) -> None:
    skill = write_skill(tmp_path / "src" / "keep", "keep")
    registry = Registry(tmp_path / "registry", database=database)
    first, _ = registry.publish("keep", skill, actor="alice")
    blobs = blob_count(registry)
    again, created = registry.publish("keep", skill, actor="alice")
    assert (again.number, again.digest, created) == (1, first.digest, False)
    assert blob_count(registry) == blobs  # no duplicate storage
    (skill / "data.txt").write_text("two")
    second, created = registry.publish("keep", skill, actor="bob")
    assert created and second.number == 2 and second.digest != first.digest
    assert blob_count(registry) == blobs + 1  # only the changed file is new
    # SKILL.md of both versions is one inode (hard links to one blob)
    assert (registry.folder(first) / "SKILL.md").stat().st_ino == (registry.folder(second) / "SKILL.md").stat().st_ino

    reopened = Registry(tmp_path / "registry", database=database)
    assert [(v.number, v.digest) for v in reopened.versions("keep")] == [(1, first.digest), (2, second.digest)]
    assert reopened.pointers("keep") == (2, 2)
    assert (reopened.folder(reopened.version("keep", 1)) / "data.txt").read_text() == "one"
    assert reopened.version("keep", first.digest).number == 1
    assert reopened.version("keep", "latest").number == 2


def test_concurrent_publishes_get_consecutive_versions(tmp_path: Path, database: Database) -> None:
    registry = Registry(tmp_path / "registry", database=database)
    sources = [write_skill(tmp_path / f"src{i}" / "busy", "busy", f"content {i}") for i in range(8)]
    # a second handle, as another process has: the flock and the database, not only the thread lock
    other = Registry(tmp_path / "registry", database=another_process(database))
    results: list[int] = []
    errors: list[BaseException] = []

    def publish(i: int) -> None:
        try:
            results.append((registry if i % 2 else other).publish("busy", sources[i], actor="ci")[0].number)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=publish, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(results) == list(range(1, 9))
    assert len({v.digest for v in registry.versions("busy")}) == 8
    other.index.database.close()


def test_deletes_pointers_leases_and_the_audit_log(tmp_path: Path, database: Database) -> None:
    skill = write_skill(tmp_path / "src" / "gone", "gone")
    registry = Registry(tmp_path / "registry", database=database)
    registry.publish("gone", skill, actor="alice")
    (skill / "data.txt").write_text("two")
    registry.publish("gone", skill, actor="alice")
    with pytest.raises(Conflict) as refused:
        registry.delete_version("gone", 2, actor="bob")
    assert refused.value.code == "version_is_default"
    registry.set_default("gone", 1, actor="bob")
    pinned = registry.load(registry.version("gone", 2))
    with registry.lease(pinned):
        with pytest.raises(Conflict) as busy:
            registry.delete_version("gone", 2, actor="bob")
        assert busy.value.code == "version_in_use"
        assert (registry.folder(registry.version("gone", 2)) / "data.txt").read_text() == "two"
    deleted = registry.delete_version("gone", 2, actor="bob")
    with pytest.raises(NotFound):
        registry.version("gone", 2)
    assert registry.pointers("gone") == (1, 1)
    (skill / "data.txt").write_text("three")
    assert registry.publish("gone", skill, actor="alice")[0].number == 3  # numbers are never reused
    actions = [(e.action, e.actor, e.version) for e in reversed(registry.audit("gone"))]
    assert actions == [
        ("publish", "alice", 1),
        ("publish", "alice", 2),
        ("set_default", "bob", 1),
        ("delete_version", "bob", 2),
        ("publish", "alice", 3),
    ]
    assert registry.audit("gone")[1].digest == deleted.digest


def test_a_folder_skill_edited_on_disk_is_a_new_version_on_next_load(tmp_path: Path, database: Database) -> None:
    root = tmp_path / "skills"
    folder = write_skill(root / "live", "live")
    repository = SkillRepository(
        [root], refresh_interval=0, registry=Registry(tmp_path / "registry", database=database)
    )
    first = repository.get("live")
    assert (first.version, (first.path / "data.txt").read_text()) == (1, "one")
    assert repository.get("live").version == 1  # unchanged: no new version
    (folder / "data.txt").write_text("edited")
    second = repository.get("live")
    assert (second.version, (second.path / "data.txt").read_text()) == (2, "edited")
    assert second.digest != first.digest
    pinned = repository.get("live@1")
    assert (pinned.version, pinned.digest, (pinned.path / "data.txt").read_text()) == (1, first.digest, "one")
    assert repository.get(f"live@{first.digest}").version == 1
    assert repository.get("LIVE@latest").version == 2
    with pytest.raises(NotFound):
        repository.get("live@9")
    stale = SkillRepository([root], refresh_interval=3600, registry=repository.registry)
    stale.get("live")
    (folder / "SKILL.md").unlink()  # gone from disk, still in the stale catalog
    with pytest.raises(NotFound):
        stale.get("live")
    assert repository.registry is not None and len(repository.registry.versions("live")) == 2


def test_an_install_is_a_version_and_the_name_check_runs_before_it_goes_live(
    tmp_path: Path, database: Database
) -> None:
    repository = SkillRepository(
        [],
        install_root=tmp_path / "installed",
        refresh_interval=0,
        registry=Registry(tmp_path / "registry", database=database),
    )
    one = repository.install(skill_zip("pkg", "one"))
    assert one.version is not None and (one.version.number, one.created) == (1, True)
    again = repository.install(skill_zip("pkg", "one"))
    assert again.version is not None and (again.version.number, again.created) == (1, False)

    def expect_other(skill):  # type: ignore[no-untyped-def]
        if skill.id != "other":
            raise Conflict("wrong name", code="name_mismatch")

    with pytest.raises(Conflict):
        repository.install(skill_zip("pkg", "two"), check=expect_other)
    assert [v.number for v in repository.registry.versions("pkg")] == [1]  # type: ignore[union-attr]
    assert (repository.get("pkg").path / "data.txt").read_text() == "one"


# -- runs on the real engine -------------------------------------------------------------


@pytest.fixture
def docker_executor(tmp_path: Path, docker_runtime_name: str) -> Iterator[Executor]:
    executor = Executor.from_settings(make_settings(tmp_path, docker_runtime_name, pool_size=0))
    yield executor
    executor.close()


def test_a_pinned_run_sees_its_version_while_a_newer_one_is_published(docker_executor: Executor) -> None:
    repository = docker_executor.repository
    repository.install(skill_zip("pinned", "version one"))
    result: dict[str, object] = {}

    def run() -> None:
        request = RunRequest(skill="pinned@1", command="sleep 2; cat data.txt")
        result["run"] = docker_executor.runner.run(request)

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 30
    registry = repository.registry
    assert registry is not None
    while not registry.in_use("pinned", 1) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert registry.in_use("pinned", 1) == 1
    installed = repository.install(skill_zip("pinned", "version two"))  # published mid-run
    assert installed.version is not None and installed.version.number == 2
    registry.set_default("pinned", 2, actor="test")
    with pytest.raises(Conflict):
        registry.delete_version("pinned", 1, actor="test")  # in use: refused
    worker.join(60)
    pinned = result["run"]
    assert pinned.stdout == "version one"  # type: ignore[attr-defined]
    assert pinned.skill_version == 1  # type: ignore[attr-defined]
    assert pinned.skill_digest == registry.version("pinned", 1).digest  # type: ignore[attr-defined]

    unpinned = docker_executor.runner.run(RunRequest(skill="pinned", command="cat data.txt"))
    assert (unpinned.stdout, unpinned.skill_version) == ("version two", 2)
    registry.set_default("pinned", 1, actor="test")  # rollback
    rolled = docker_executor.runner.run(
        RunRequest.model_validate(
            {
                "skill": "pinned",
                "command": "cat data.txt; echo; cat $WORK_DIR/inputs/v2.txt",
                "inputs": [{"from": "skill://pinned@2/data.txt", "to": "inputs/v2.txt"}],
            }
        )
    )
    assert (rolled.stdout, rolled.skill_version) == ("version one\nversion two", 1)


# -- the service, the client and the CLI -------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("registry"), env={"SKILL_EXECUTOR_SKILL_UPLOAD_MAX_FILES": "5"})
    srv.start()
    yield srv
    srv.stop()


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "skill_executor.cli.main", "skills", *args],
        cwd=REPO,
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_push_versions_pin_and_pull_through_the_cli(server: Server, tmp_path: Path) -> None:
    import json

    folder = write_skill(tmp_path / "ci" / "shipped", "shipped", "first")
    pushed = cli("push", str(folder), "--server", server.url)
    assert pushed.returncode == 0, pushed.stderr
    first = json.loads(pushed.stdout)
    assert (first["id"], first["version"], first["created"], first["is_default"]) == ("shipped", 1, True, True)
    (folder / "data.txt").write_text("second")
    pushed = cli("push", str(folder), "--server", server.url, "--no-default")
    second = json.loads(pushed.stdout)
    assert pushed.returncode == 0 and (second["version"], second["is_default"]) == (2, False)

    listed = json.loads(cli("versions", "shipped", "--server", server.url).stdout)
    assert (listed["default_version"], listed["latest_version"]) == (1, 2)
    assert [v["digest"] for v in listed["versions"]] == [first["digest"], second["digest"]]

    pinned = cli("pin", "shipped", "2", "--server", server.url)
    assert pinned.returncode == 0 and json.loads(pinned.stdout)["is_default"] is True
    pulled = cli("pull", "shipped@1", str(tmp_path / "pulled"), "--server", server.url)
    assert pulled.returncode == 0, pulled.stderr
    assert (tmp_path / "pulled" / "data.txt").read_text() == "first"
    assert os.access(tmp_path / "pulled" / "scripts" / "show.sh", os.X_OK)  # scripts/ are executable
    assert json.loads(pulled.stdout)["digest"] == first["digest"]

    (folder / "SKILL.md").write_text("---\nname: shipped\n---\nno description\n")
    invalid = cli("push", str(folder), "--server", server.url)
    assert invalid.returncode == 1 and "nothing pushed" in invalid.stderr
    down = cli("versions", "shipped", "--server", "http://127.0.0.1:9")
    assert down.returncode == 3


def test_the_rest_api(server: Server, tmp_path: Path) -> None:
    with Client(server.url) as client:
        made = client.install_skill(skill_zip("rest", "one"))
        assert (made.version, made.created) == (1, True)
        assert made.findings == [] and made.strict is False
        files = [
            ("rest/SKILL.md", b"---\nname: rest\ndescription: A versioned skill.\n---\n# rest\n"),
            ("rest/data.txt", b"two"),
        ]
        two = client.send(Client_push(files, "rest"))
        assert (two.version, two.digest != made.digest) == (2, True)
        with pytest.raises(ApiError) as wrong:
            client.send(Client_push([("other/SKILL.md", b"---\nname: other\ndescription: x.\n---\n")], "rest"))
        assert (wrong.value.status, wrong.value.code) == (400, "name_mismatch")
        with pytest.raises(ApiError) as missing:
            client.send(Client_push(files, "nope"))
        assert missing.value.status == 404

        manifest = client.skill_version("rest", 1)
        assert manifest.files is not None and {f.path for f in manifest.files} == {"SKILL.md", "data.txt"}
        assert all(len(f.sha256) == 64 for f in manifest.files)
        assert client.load_skill("rest@1").version == 1
        assert client.load_skill("rest").version == client.skill_versions("rest").default_version
        assert client.read_file("rest@1", "data.txt") == b"one"

        with pytest.raises(ApiError) as default:
            client.delete_skill_version("rest", client.skill_versions("rest").default_version)
        assert (default.value.status, default.value.code) == (409, "version_is_default")
        client.set_default_version("rest", 1)
        run = client.run({"skill": "rest", "command": "cat data.txt"})
        assert (run.stdout, run.skill_version) == ("one", 1)
        record = client.get_run(run.run_id)
        assert record.result is not None and record.result.skill_digest == manifest.digest

        loose = [("SKILL.md", b"---\nname: rest\ndescription: Loose.\nflavour: extra\n---\n# rest\n")]
        tolerated = client.send(Client_push(loose, "rest", strict=False, set_default=False))
        assert "unknown-field" in {f.code for f in tolerated.findings or []}
        assert (tolerated.version, tolerated.is_default) == (3, False)
        with pytest.raises(ApiError) as strict:
            client.send(Client_push(loose + [("x.txt", b"x")], "rest", strict=True))
        assert (strict.value.status, strict.value.code) == (400, "invalid_skill")
        with pytest.raises(ApiError) as many:
            client.send(Client_push(files + [(f"rest/{i}.txt", b"x") for i in range(4)], "rest"))
        assert (many.value.status, many.value.code) == (413, "upload_too_many_files")

        async def pull_async() -> dict[str, object]:
            async with AsyncClient(server.url) as async_client:
                assert (await async_client.skill_versions("rest")).latest_version == 3
                return await async_client.pull_skill("rest", tmp_path / "async-pull", 1)

        assert asyncio.run(pull_async())["version"] == 1
        assert (tmp_path / "async-pull" / "data.txt").read_text() == "one"

        content = client.send(Client_content("rest", 1))
        with zipfile.ZipFile(io.BytesIO(content.content)) as archive:
            assert archive.read("rest/data.txt") == b"one"
        assert content.headers["x-skill-digest"] == manifest.digest

        audit = client.skill_audit("rest").entries
        assert [e.action for e in reversed(audit)][:2] == ["publish", "publish"]
        assert all(e.actor and e.at for e in audit)
        client.delete_skill("rest")
        with pytest.raises(ApiError):
            client.skill_versions("rest")
        assert client.skill_audit("rest").entries[0].action == "delete_skill"
    assert httpx.get(f"{server.url}/v1/skills/rest/versions").status_code == 404


def Client_push(
    files: list[tuple[str, bytes]],
    name: str,
    *,
    strict: bool | None = None,  # type: ignore[no-untyped-def]
    set_default: bool = True,
):
    return Typed.push_skill(files, name, strict, set_default)


def Client_content(name: str, version: int):  # type: ignore[no-untyped-def]
    return Typed.skill_version_content(name, version)


def test_uploads_over_the_byte_cap_are_refused_before_they_are_held(tmp_path: Path) -> None:
    srv = Server(tmp_path, env={"SKILL_EXECUTOR_SKILL_UPLOAD_MAX_BYTES": "2000"}).start()
    try:
        skill_md = b"---\nname: capped\ndescription: Capped upload. Use in tests.\n---\n# capped\n"
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
            archive.writestr("capped/SKILL.md", skill_md)
            archive.writestr("capped/blob.bin", os.urandom(5000))
        raw = httpx.post(f"{srv.url}/v1/skills", content=buffer.getvalue(), headers={"Content-Type": "application/zip"})
        assert raw.status_code == 413 and raw.json()["error"]["code"] == "upload_too_large"
        parts = [("files[]", ("SKILL.md", skill_md)), ("files[]", ("blob.bin", os.urandom(3000)))]
        form = httpx.post(f"{srv.url}/v1/skills", files=parts)
        assert form.status_code == 413 and form.json()["error"]["code"] == "upload_too_large"
        small = httpx.post(f"{srv.url}/v1/skills", files=[("files[]", ("SKILL.md", skill_md))])
        assert small.status_code in (200, 201), small.text
    finally:
        srv.stop()


# -- rollbacks of folder-root skills hold --------------------------------------------------


def test_a_rollback_of_a_folder_skill_holds_across_touches_edits_and_a_reopen(
    tmp_path: Path, database: Database
) -> None:
    root = tmp_path / "skills"
    folder = write_skill(root / "held", "held")
    repository = SkillRepository(
        [root], refresh_interval=0, registry=Registry(tmp_path / "registry", database=database)
    )
    assert repository.get("held").version == 1
    (folder / "data.txt").write_text("two")
    assert repository.get("held").version == 2  # the default follows the folder ...
    registry = repository.registry
    assert registry is not None and not registry.default_held("held")
    registry.set_default("held", 1, actor="ops")  # ... until someone rolls it back
    assert registry.default_held("held")
    os.utime(folder / "data.txt", ns=(time.time_ns(), time.time_ns() + 5_000_000_000))  # a touch
    assert (repository.get("held").version, (repository.get("held").path / "data.txt").read_text()) == (1, "one")
    reopened = SkillRepository([root], refresh_interval=0, registry=Registry(tmp_path / "registry", database=database))
    assert reopened.get("held").version == 1  # a restart: the folder is observed again, the default holds
    (folder / "data.txt").write_text("three")
    assert reopened.get("held").version == 1  # a changed folder is a new latest version, not the default
    assert reopened.registry is not None and reopened.registry.pointers("held") == (1, 3)
    assert reopened.get("held@latest").version == 3
    reopened.registry.set_default("held", "latest", actor="ops")  # follow the folder again
    assert not reopened.registry.default_held("held")
    (folder / "data.txt").write_text("four")
    assert reopened.get("held").version == 4
    reopened.registry.set_default("held", 4, actor="ops")  # a pin, even to the latest, holds
    (folder / "data.txt").write_text("five")
    assert reopened.get("held").version == 4 and reopened.registry.pointers("held") == (4, 5)
    details = [(e.action, e.version, e.detail) for e in reversed(reopened.registry.audit("held"))]
    assert ("set_default", 1, "held") in details and ("set_default", 3, "follows latest") in details


def test_a_rollback_of_a_folder_skill_holds_across_a_touch_and_a_server_restart(tmp_path: Path) -> None:
    srv = Server(tmp_path)
    srv.start()
    folder = write_skill(srv.skills_dir / "rolled", "rolled", "good")
    try:
        with Client(srv.url) as client:
            assert client.load_skill("rolled").version == 1
            (folder / "data.txt").write_text("bad")
            assert client.load_skill("rolled").version == 2
            client.set_default_version("rolled", 1)  # the rollback
            assert client.skill_versions("rolled").default_held is True
            os.utime(folder / "data.txt")  # a touch: new times, same content
            os.utime(folder / "SKILL.md")
            assert client.load_skill("rolled").version == 1
            ran = client.run({"skill": "rolled", "command": "cat data.txt"})
            assert (ran.stdout, ran.skill_version) == ("good", 1)
        srv.stop()
        os.utime(folder / "data.txt")
        srv.start()  # a real restart: the folder is observed anew by a new process
        with Client(srv.url) as client:
            assert client.load_skill("rolled").version == 1
            ran = client.run({"skill": "rolled", "command": "cat data.txt"})
            assert (ran.stdout, ran.skill_version) == ("good", 1)
            (folder / "data.txt").write_text("worse")
            assert client.load_skill("rolled").version == 1  # a new version, not the default
            listed = client.skill_versions("rolled")
            assert (listed.default_version, listed.latest_version) == (1, 3)
            assert [v.source for v in listed.versions] == ["folder"] * 3
            client.set_default_version("rolled", "latest")  # explicitly: follow the folder again
            (folder / "data.txt").write_text("fixed")
            assert client.load_skill("rolled").version == 4
    finally:
        srv.stop()
