"""Inline skill bundles in a run request, and files by id, on a real server with two keys.

A bundle is checked exactly as an install is (the same codes for the same hostile archives),
kept per key by digest (not unpacked twice, never in a catalog, unknown to another key), and
runs like an installed skill.  A file uploaded once is a run input by id; a run's saved
outputs carry ids the next run takes; another key's id is 404 everywhere.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import os
import shutil
import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from skill_executor_client import ApiError, AsyncClient, Client

from ..api_server import Server
from ..cluster import Cluster
from ..conftest import REPO, require_runtime
from ..pgserver import PostgresServer
from ..service.test_api import expect_error
from ..service.test_api_tenancy import ADMIN, KEY_A, KEY_B, key_id
from ..service.test_mcp import http_client

A = key_id(KEY_A)
SKILL_MD = "---\nname: one-off\ndescription: A skill sent with the run.\n---\n# One-off\nRun scripts/hi.sh NAME\n"
#: A small upload cap, so "too large" is cheap to show (the install's cap: the same setting).
UPLOAD_CAP = 256 * 1024


def zip_of(entries: dict[str, bytes], *, symlinks: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, target)
    return buffer.getvalue()


ONE_OFF = zip_of({"one-off/SKILL.md": SKILL_MD.encode(), "one-off/scripts/hi.sh": b'echo "hello $1 from a bundle"\n'})


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(
        tmp_path_factory.mktemp("inline"),
        env={
            "SKILL_EXECUTOR_API_KEYS": f"{KEY_A},{KEY_B}",
            "SKILL_EXECUTOR_ADMIN_KEYS": ADMIN,
            "SKILL_EXECUTOR_POOL_SIZE": "0",
            "SKILL_EXECUTOR_SKILL_UPLOAD_MAX_BYTES": str(UPLOAD_CAP),
        },
    )
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def clients(server: Server) -> Iterator[tuple[Client, Client, Client]]:
    with (
        Client(server.url, api_key=KEY_A) as a,
        Client(server.url, api_key=KEY_B) as b,
        Client(server.url, api_key=ADMIN) as admin,
    ):
        yield a, b, admin


# -- inline bundles ------------------------------------------------------------------------------


def test_bundle_runs_like_an_installed_skill_and_is_nobody_elses(
    server: Server, clients: tuple[Client, Client, Client], tmp_path: Path
) -> None:
    a, b, _ = clients
    folder = tmp_path / "one-off"
    (folder / "scripts").mkdir(parents=True)
    (folder / "SKILL.md").write_text(SKILL_MD)
    (folder / "scripts" / "hi.sh").write_text('echo "hello $1 from a folder"\n')

    # The client zips a folder; the skill's view is an installed skill's: SKILL_DIR, scripts, out/.
    result = a.run(
        {
            "command": 'bash scripts/hi.sh A > out/hi.txt; cat out/hi.txt; echo "$SKILL_NAME"; '
            'test -f "$SKILL_DIR/SKILL.md" && echo "$PWD" = "$SKILL_DIR"',
            "outputs": {"globs": ["out/hi.txt"]},
        },
        bundle=folder,
    )
    assert result.exit_code == 0, result
    lines = result.stdout.splitlines()
    assert lines[:2] == ["hello A from a folder", "one-off"]
    cwd, skill_dir = lines[2].split(" = ")
    assert cwd == skill_dir and skill_dir.endswith("/skills/one-off")  # it runs from its folder, as installed ones
    assert result.output_files[0].content == "hello A from a folder\n"
    assert result.skill == "one-off" and result.skill_version is None
    bundle_digest = result.skill_digest
    assert bundle_digest.startswith("sha256:")

    # Recorded with its digest, never the archive; not in any catalog or listing.
    record = a.get_run(result.run_id)
    assert record.request["bundle"] == {"digest": bundle_digest} and record.skill == "one-off"
    for client in (a, b):
        assert "one-off" not in [s.id for s in client.list_skills().skills]
        with expect_error(404, "skill_not_found"):
            client.load_skill("one-off")
    assert [r.run_id for r in a.list_runs(skill="one-off").runs] == [result.run_id]

    # The digest alone runs it again for this key; another key neither finds it by name nor by digest.
    again = a.run({"command": "bash scripts/hi.sh again", "bundle": {"digest": bundle_digest}})
    assert again.stdout == "hello again from a folder\n" and again.skill_digest == bundle_digest
    with expect_error(404, "bundle_not_found"):
        b.run({"command": "true", "bundle": {"digest": bundle_digest}})
    with expect_error(404, "skill_not_found"):
        b.run({"skill": "one-off", "command": "true"})
    with expect_error(404, "bundle_not_found"):
        a.run({"command": "true", "bundle": {"digest": "sha256:" + "0" * 64}})

    # skill, when given with a bundle, must name it.
    with expect_error(400, "name_mismatch"):
        a.run({"skill": "math-tools", "command": "true"}, bundle=folder)
    assert a.run({"skill": "One-Off", "command": "true"}, bundle=folder).exit_code == 0


def test_bundle_is_unpacked_once_per_key(server: Server, clients: tuple[Client, Client, Client]) -> None:
    a, b, _ = clients
    first = a.run({"command": "bash scripts/hi.sh 1"}, bundle=ONE_OFF)
    assert first.stdout == "hello 1 from a bundle\n" and first.skill_digest == digest(ONE_OFF)
    unpacked = server.data_dir / "bundles" / A / digest(ONE_OFF).removeprefix("sha256:") / "one-off" / "SKILL.md"
    before = os.stat(unpacked)
    # The same bytes again (the OpenAI-shaped field, sent by hand): the cached copy, not a new one.
    field = {"type": "base64", "media_type": "application/zip", "data": base64.b64encode(ONE_OFF).decode()}
    second = a.run({"command": "bash scripts/hi.sh 2", "bundle": field})
    assert second.stdout == "hello 2 from a bundle\n"
    after = os.stat(unpacked)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    # Another key sending the same bytes gets a copy of its own, never a shared one.
    assert b.run({"command": "bash scripts/hi.sh B"}, bundle=ONE_OFF).stdout == "hello B from a bundle\n"
    theirs = server.data_dir / "bundles" / key_id(KEY_B) / digest(ONE_OFF).removeprefix("sha256:")
    assert (theirs / "one-off" / "SKILL.md").is_file()
    # A copy removed from the disk is built again from the object store's archive (checked again).
    shutil.rmtree(unpacked.parents[1])
    rebuilt = a.run({"command": "bash scripts/hi.sh 3", "bundle": {"digest": digest(ONE_OFF)}})
    assert rebuilt.stdout == "hello 3 from a bundle\n" and unpacked.is_file()


def test_bundle_in_a_session(clients: tuple[Client, Client, Client]) -> None:
    a, _, _ = clients
    first = a.run({"command": "bash scripts/hi.sh s > $WORK_DIR/kept.txt", "session": "bundle-session"}, bundle=ONE_OFF)
    assert first.exit_code == 0 and first.session == "bundle-session", first
    second = a.run(
        {"command": "cat $WORK_DIR/kept.txt", "session": "bundle-session", "bundle": {"digest": digest(ONE_OFF)}}
    )
    assert second.stdout == "hello s from a bundle\n", second


SKILL = b"---\nname: hostile\ndescription: A hostile bundle.\n---\n# Hostile\n"
HOSTILE = {
    "zip-slip": zip_of({"SKILL.md": SKILL, "../../evil.txt": b"x"}),
    "absolute-path": zip_of({"SKILL.md": SKILL, "/tmp/evil.txt": b"x"}),
    "symlink": zip_of({"SKILL.md": SKILL}, symlinks={"passwd": "/etc/passwd"}),
    "no-skill-md": zip_of({"README.md": b"no skill here"}),
    "two-skills": zip_of({"a/SKILL.md": SKILL, "b/SKILL.md": SKILL}),
    "bad-skill-md": zip_of({"SKILL.md": b"---\nname: x\n---\n"}),
    "not-an-archive": b"plain text, not an archive",
    "zip-bomb": zip_of({"SKILL.md": SKILL, "bomb.bin": b"\0" * (40 * 1024 * 1024)}),
    "over-the-upload-cap": zip_of({"SKILL.md": SKILL, "noise.bin": os.urandom(UPLOAD_CAP)}),
}


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_hostile_bundles_are_refused_as_installs_are(
    server: Server, clients: tuple[Client, Client, Client], kind: str
) -> None:
    a, _, admin = clients
    archive = HOSTILE[kind]
    with pytest.raises(ApiError) as installed:
        admin.install_skill(archive, multipart=False)
    with pytest.raises(ApiError) as inline:
        a.run({"command": "true"}, bundle=archive)
    assert (inline.value.status, inline.value.code) == (installed.value.status, installed.value.code), (
        inline.value.message,
        installed.value.message,
    )
    expected = {
        "no-skill-md": "invalid_package",
        "bad-skill-md": "invalid_skill",
        "zip-bomb": "package_too_large",
        "over-the-upload-cap": "upload_too_large",
    }.get(kind, "invalid_package")
    assert inline.value.code == expected
    assert not Path("/tmp/evil.txt").exists() and not (server.base / "evil.txt").exists()
    folder = server.data_dir / "bundles" / A / hashlib.sha256(archive).hexdigest()
    assert not folder.exists()  # a refused bundle leaves nothing behind


def test_bundle_data_must_be_base64(clients: tuple[Client, Client, Client]) -> None:
    a, _, _ = clients
    with expect_error(400, "invalid_bundle"):
        a.run({"command": "true", "bundle": {"data": "not base64!"}})
    with expect_error(422):
        a.run({"command": "true", "bundle": {"data": "UEs=", "digest": digest(b"x")}})
    with expect_error(422):
        a.run({"command": "true"})  # neither a skill nor a bundle


def test_bundle_over_mcp_skill_run(server: Server) -> None:
    archive = zip_of({"SKILL.md": SKILL_MD.encode(), "scripts/hi.sh": b'echo "hello $1 over MCP"\n'})

    async def main() -> None:
        async with http_client(server, KEY_A) as mcp:
            data = base64.b64encode(archive).decode()
            result = await mcp.call_tool("skill_run", {"command": "bash scripts/hi.sh A", "bundle": {"data": data}})
            assert not result.is_error, result.content
            # the stream is in the text only (each byte once); structuredContent has the rest
            assert result.content[0].text.splitlines()[1:] == ["stdout:", "hello A over MCP"]  # type: ignore[union-attr]
            assert "stdout" not in result.structured_content
            assert result.structured_content["skill_digest"] == digest(archive)
            again = await mcp.call_tool(
                "skill_run", {"command": "bash scripts/hi.sh 2", "bundle": {"digest": digest(archive)}}
            )
            assert again.content[0].text.splitlines()[1:] == ["stdout:", "hello 2 over MCP"]  # type: ignore[union-attr]
        async with http_client(server, KEY_B) as mcp:  # B never sent it
            refused = await mcp.call_tool("skill_run", {"command": "true", "bundle": {"digest": digest(archive)}})
            assert refused.is_error and "bundle_not_found" in refused.content[0].text

    asyncio.run(main())


# -- files by id ---------------------------------------------------------------------------------


def test_files_by_id_round_trip(server: Server, clients: tuple[Client, Client, Client], tmp_path: Path) -> None:
    a, b, _ = clients
    source = tmp_path / "sales data.csv"
    source.write_text("region,amount\nnorth,3\nsouth,4\n")
    uploaded = a.upload_file(source)
    assert uploaded.name == "sales_data.csv" and uploaded.size == source.stat().st_size
    assert uploaded.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
    assert uploaded.mime_type == "text/csv" and uploaded.id.startswith("file-")
    assert a.get_file(uploaded.id) == uploaded
    assert a.file_content(uploaded.id) == source.read_bytes()

    # Multipart: the part's file name names it.
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY_A}"}) as http:
        response = http.post("/v1/files", files={"file": ("notes.txt", b"remember\n", "text/plain")})
    assert response.status_code == 201, response.text
    notes = response.json()
    assert (notes["name"], notes["mime_type"], notes["size"]) == ("notes.txt", "text/plain", 9)

    # By id as inputs (staged as inputs/<name>); the outputs it saves carry ids the next run takes.
    first = a.run(
        {
            "skill": "math-tools",
            "command": "awk -F, 'NR > 1 {s += $2} END {print s}' inputs/sales_data.csv > out/total.txt; "
            "cat inputs/notes.txt",
            "inputs": [{"file_id": uploaded.id}, {"file_id": notes["id"]}],
            "outputs": {"globs": ["out/*.txt"], "save": True, "name_template": "totals/{name}"},
        }
    )
    assert first.exit_code == 0 and first.stdout == "remember\n", first
    [output] = first.output_files
    assert output.content == "7\n" and output.file_id == first.artifact_files[0].file_id
    assert a.file_content(output.file_id) == b"7\n"
    saved = a.get_file(output.file_id)
    assert (saved.name, saved.run_id) == ("totals/total.txt", first.run_id)
    second = a.run(
        {
            "skill": "math-tools",
            "command": "echo $(( $(cat inputs/t.txt) * 6 ))",
            "inputs": [{"file_id": output.file_id, "to": "inputs/t.txt"}],
        }
    )
    assert second.stdout == "42\n", second
    listed = {f.id for f in a.list_files().files}
    assert {uploaded.id, notes["id"], output.file_id} <= listed

    # Another key: every id of A's is unknown -- metadata, content, input, delete; its own listing lacks them.
    for file_id in (uploaded.id, output.file_id):
        with expect_error(404, "file_not_found"):
            b.get_file(file_id)
        with expect_error(404, "file_not_found"):
            b.file_content(file_id)
        with expect_error(404, "file_not_found"):
            b.delete_file(file_id)
        with expect_error(404, "file_not_found"):
            b.run({"skill": "math-tools", "command": "true", "inputs": [{"file_id": file_id}]})
    assert not {uploaded.id, output.file_id} & {f.id for f in b.list_files().files}
    # B saving a file of the same name and version number still gets an id of its own.
    theirs = b.upload_file(b"other\n", name="sales data.csv")
    assert theirs.version == uploaded.version and theirs.id != uploaded.id
    for bad in ("nope", "file-" + "A" * 8 + ".1.0123456789abcdef0123", uploaded.id[:-1] + "0"):
        with expect_error(404, "file_not_found"):
            a.get_file(bad)

    # Deleting the file deletes that version; its id is then unknown.
    assert a.delete_file(uploaded.id).id == uploaded.id
    with expect_error(404, "file_not_found"):
        a.get_file(uploaded.id)


def test_files_async_client_and_artifact_ids(server: Server, tmp_path: Path) -> None:
    (tmp_path / "greeting.txt").write_bytes(b"hi there\n")

    async def main() -> None:
        async with AsyncClient(server.url, api_key=KEY_A) as a:
            up = await a.upload_file(str(tmp_path / "greeting.txt"))  # a path as str: its content, its name
            assert (up.name, await a.file_content(up.id)) == ("greeting.txt", b"hi there\n")
            # Every artifact version has an id: the artifacts API shows it, and it is the same file.
            [version] = [v for v in (await a.artifact_versions("greeting.txt")).artifacts if v.version == up.version]
            assert version.file_id == up.id
            with pytest.raises(ValueError, match="name="):
                await a.upload_file(b"x")  # bytes without a name: refused before anything is sent

    asyncio.run(main())


def test_file_upload_refusals(server: Server) -> None:
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY_A}"}) as http:
        raw = http.post("/v1/files", content=b"x")
        assert raw.status_code == 400 and raw.json()["error"]["code"] == "invalid_upload"
        two = http.post("/v1/files", files=[("file", ("a.txt", b"a")), ("other", ("b.txt", b"b"))])
        assert two.status_code == 400, two.text
        weird = http.post("/v1/files", params={"name": "../../etc/pass wd"}, content=b"x")
        assert weird.status_code == 201 and weird.json()["name"] == "pass_wd"
    with httpx.Client(base_url=server.url) as anonymous:
        assert anonymous.post("/v1/files", params={"name": "a"}, content=b"x").status_code == 401


def test_typed_client(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The typed client (client/, its own distribution): bundle= and files, answers as models."""
    monkeypatch.syspath_prepend(str(REPO / "client"))
    from skill_executor_client import ApiError as TypedError
    from skill_executor_client import Client as Typed
    from skill_executor_client import FileModel, RunResult

    with Typed(server.url, api_key=KEY_A) as a, Typed(server.url, api_key=KEY_B) as b:
        result = a.run({"command": "bash scripts/hi.sh typed"}, bundle=ONE_OFF)
        assert isinstance(result, RunResult) and result.stdout == "hello typed from a bundle\n"
        assert result.skill_digest == digest(ONE_OFF)
        up = a.upload_file(b"5\n", name="five.txt")
        assert isinstance(up, FileModel) and a.get_file(up.id) == up and a.file_content(up.id) == b"5\n"
        squared = a.run(
            {
                "skill": "math-tools",
                "command": "echo $(( $(cat inputs/five.txt) ** 2 ))",
                "inputs": [{"file_id": up.id}],
            }
        )
        assert squared.stdout == "25\n"
        with pytest.raises(TypedError) as refused:
            b.get_file(up.id)
        assert (refused.value.status, refused.value.code) == (404, "file_not_found")
        assert up.id in {f.id for f in a.list_files().files} and a.delete_file(up.id).id == up.id


# -- a cluster: accepted by an API replica, executed by a worker ---------------------------------


def test_bundle_and_file_ids_across_a_cluster(postgres_server: PostgresServer, tmp_path: Path) -> None:
    """The replica checks the bundle and keeps the archive in the object store; the worker, which
    never saw it, builds the same folder from there.  A file id made on one process is a run input
    on another."""
    require_runtime("docker")
    name = postgres_server.create_database()
    cluster = Cluster(tmp_path / "cluster", postgres_server.url(name), apis=1, workers=1)
    try:
        cluster.start()
        with Client(cluster.api(0)) as client:
            archive = zip_of({"SKILL.md": SKILL_MD.encode(), "scripts/hi.sh": b'echo "hello $1 from a worker"\n'})
            result = client.run({"command": "bash scripts/hi.sh C"}, bundle=archive)
            assert result.stdout == "hello C from a worker\n", result
            key = f"bundles/local/{hashlib.sha256(archive).hexdigest()}"
            assert (tmp_path / "cluster" / "objects" / key).is_file()
            worker_copy = tmp_path / "cluster" / "worker-0" / "data" / "bundles" / "local"
            assert (worker_copy / key.rsplit("/", 1)[-1] / "one-off" / "SKILL.md").is_file()
            again = client.run({"command": "bash scripts/hi.sh D", "bundle": {"digest": digest(archive)}})
            assert again.stdout == "hello D from a worker\n"

            uploaded = client.upload_file(b"21\n", name="n.txt")
            doubled = client.run(
                {
                    "skill": "math-tools",
                    "command": "echo $(( $(cat inputs/n.txt) * 2 ))",
                    "inputs": [{"file_id": uploaded.id}],
                }
            )
            assert doubled.stdout == "42\n", doubled
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.close()
        postgres_server.drop_database(name)


def test_a_bundle_needs_only_what_the_image_provides(clients: tuple[Client, Client, Client]) -> None:
    """Any key may send a bundle: its declared dependencies are not fetched on the service's
    host (SKILL_EXECUTOR_BUNDLE_DEPS=image, the default); what the image provides is fine."""
    a, _, _ = clients
    needy = zip_of(
        {
            "needy/SKILL.md": SKILL_MD.replace("one-off", "needy").encode(),
            "needy/requirements.txt": b"numpy\nsome-package-the-image-lacks>=1\n",
        }
    )
    with pytest.raises(ApiError) as info:
        a.run({"command": "true"}, bundle=needy)
    assert info.value.status == 422 and info.value.code == "skill_dependencies_unmet"
    assert "some-package-the-image-lacks>=1" in info.value.message and "BUNDLE_DEPS" in info.value.message
    provided = zip_of(
        {
            "provided/SKILL.md": SKILL_MD.replace("one-off", "provided").encode(),
            "provided/requirements.txt": b"numpy\npandas\n",
        }
    )
    result = a.run({"command": "python3 -c 'import numpy, pandas; print(\"ok\")'"}, bundle=provided)
    assert (result.exit_code, result.stdout) == (0, "ok\n")
