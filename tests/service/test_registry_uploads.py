"""Uploads that try to smuggle or hijack skills, as a hostile tenant/skill author sends them.

An upload is exactly one skill.  A ``SKILL.md`` nested inside it -- at depth 1 to 6, named
like another installed skill, like a read-only (shipped) skill, or like no skill at all -- is
a plain file of the uploading skill: it is never listed, never resolved by name, never run,
and still downloadable as that skill's file.  Every way a skill enters is tried: zip, tar,
tar.gz, tar.bz2, tar.xz, the raw body, one multipart archive, multipart ``files[]``, a
replacement, a new version of an existing skill, and the CLI's install.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from skill_executor.errors import ExecutorError
from skill_executor.registry import SkillRepository
from skill_executor.registry.roots import check_layout
from skill_executor.registry.store import Registry

from ..api_server import Server
from ..conftest import REPO
from ..databases import open_database
from ..helpers import make_skill

SHIPPED = ("csv-report", "file-bundle", "math-tools")  # the read-only root of the Server (a copy of skills/)


def skill_md(name: str, description: str) -> bytes:
    return f"---\nname: {name}\ndescription: {description}\n---\n# {name}\n".encode()


def nested(top: str) -> dict[str, bytes]:
    """SKILL.md files at depth 1..6 below ``top``: named like an installed skill, a shipped one, and new ones."""
    files: dict[str, bytes] = {}
    for depth in range(1, 7):
        folder = "/".join(f"d{i}" for i in range(1, depth + 1))
        files[f"{top}/{folder}/SKILL.md"] = skill_md(
            ("target", "math-tools", f"ghost-{depth}")[(depth - 1) % 3], f"SMUGGLED at depth {depth}"
        )
        files[f"{top}/{folder}/data.txt"] = f"smuggled {depth}".encode()
    files[f"{top}/tools/target/SKILL.md"] = skill_md("target", "SMUGGLED target")
    files[f"{top}/tools/target/data.txt"] = b"evil"
    return files


def package(name: str, data: str = "carrier") -> dict[str, bytes]:
    return {f"{name}/SKILL.md": skill_md(name, f"The {name} skill."), f"{name}/data.txt": data.encode(), **nested(name)}


def as_zip(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, content in files.items():
            archive.writestr(path, content)
    return buffer.getvalue()


def as_tar(mode: str) -> Callable[[dict[str, bytes]], bytes]:
    def build(files: dict[str, bytes]) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode=mode) as archive:  # type: ignore[call-overload]
            for path, content in files.items():
                info = tarfile.TarInfo(path)
                info.size = len(content)
                archive.addfile(info, io.BytesIO(content))
        return buffer.getvalue()

    return build


def raw(build: Callable[[dict[str, bytes]], bytes]) -> Callable[[str, dict[str, bytes]], dict[str, object]]:
    return lambda _name, files: {"content": build(files), "headers": {"Content-Type": "application/octet-stream"}}


def multipart_archive(_name: str, files: dict[str, bytes]) -> dict[str, object]:
    return {"files": [("file", ("upload.tar.gz", as_tar("w:gz")(files), "application/gzip"))]}


def multipart_files(_name: str, files: dict[str, bytes]) -> dict[str, object]:
    return {"files": [("files[]", (path, content, "application/octet-stream")) for path, content in files.items()]}


CARRIERS: dict[str, Callable[[str, dict[str, bytes]], dict[str, object]]] = {
    "zip": raw(as_zip),
    "tar": raw(as_tar("w")),
    "tar-gz": raw(as_tar("w:gz")),
    "tar-bz2": raw(as_tar("w:bz2")),
    "tar-xz": raw(as_tar("w:xz")),
    "multipart-archive": multipart_archive,
    "multipart-files": multipart_files,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("uploads"))
    srv.start()
    with httpx.Client(timeout=60) as http:
        made = http.post(
            f"{srv.url}/v1/skills",
            content=as_zip({"target/SKILL.md": skill_md("target", "The real target."), "target/data.txt": b"real"}),
        )
        assert made.status_code == 201, made.text
    yield srv
    srv.stop()


def assert_only_the_registrys_skills(http: httpx.Client, url: str, uploaded: set[str]) -> None:
    listed = http.get(f"{url}/v1/skills").json()["skills"]
    assert sorted(s["id"] for s in listed) == sorted({*SHIPPED, "target", *uploaded})
    assert not any("SMUGGLED" in s["description"] for s in listed)
    for fmt in ("xml", "text"):
        assert "SMUGGLED" not in http.get(f"{url}/v1/skills", params={"format": fmt}).text
    assert not http.get(f"{url}/v1/skills", params={"q": "smuggled"}).json()["skills"]
    target = http.get(f"{url}/v1/skills/target").json()
    assert (target["description"], target["version"]) == ("The real target.", 1)
    assert http.get(f"{url}/v1/skills/target/files/data.txt").content == b"real"
    assert [v["version"] for v in http.get(f"{url}/v1/skills/target/versions").json()["versions"]] == [1]
    shipped = http.get(f"{url}/v1/skills/math-tools").json()
    assert "SMUGGLED" not in shipped["description"] and shipped["version"] == 1
    for depth in range(1, 7):
        ghost = http.get(f"{url}/v1/skills/ghost-{depth}")
        assert (ghost.status_code, ghost.json()["error"]["code"]) == (404, "skill_not_found")
        assert http.get(f"{url}/v1/skills/ghost-{depth}/versions").status_code == 404


@pytest.mark.parametrize("carrier", list(CARRIERS))
def test_a_nested_skill_md_is_a_plain_file_of_the_upload(server: Server, carrier: str) -> None:
    name = f"a-{carrier}"  # sorts before "target": the path order that used to let the nested one win
    with httpx.Client(timeout=60) as http:
        made = http.post(f"{server.url}/v1/skills", **CARRIERS[carrier](name, package(name)))  # type: ignore[arg-type]
        assert made.status_code == 201, made.text
        assert made.json()["id"] == name
        uploaded = {f"a-{c}" for c in list(CARRIERS)[: list(CARRIERS).index(carrier) + 1]}
        assert_only_the_registrys_skills(http, server.url, uploaded)
        # ... and every nested file is still the uploading skill's own, byte for byte
        manifest = {f["path"] for f in http.get(f"{server.url}/v1/skills/{name}/versions/1").json()["files"]}
        for path, content in package(name).items():
            relative = path.removeprefix(f"{name}/")
            assert relative in manifest
            assert http.get(f"{server.url}/v1/skills/{name}/files/{relative}").content == content
        loaded = http.get(f"{server.url}/v1/skills/{name}").json()
        assert "d1/d2/d3/d4/d5/d6/SKILL.md" in [f["path"] for f in loaded["files"]]


def test_a_replacement_and_a_new_version_cannot_smuggle_either(server: Server) -> None:
    with httpx.Client(timeout=60) as http:
        first = http.post(f"{server.url}/v1/skills", content=as_zip(package("a-replaced", "first")))
        assert first.status_code == 201 and first.json()["version"] == 1
        again = http.post(f"{server.url}/v1/skills", content=as_zip(package("a-replaced", "replaced")))
        assert again.status_code == 201 and again.json()["replaced"] and again.json()["version"] == 2
        files = {
            "target/SKILL.md": skill_md("target", "The real target."),
            "target/data.txt": b"real",
            **nested("target"),
        }
        version = http.post(
            f"{server.url}/v1/skills/target/versions", content=as_tar("w:xz")(files), params={"no_default": "true"}
        )
        assert version.status_code == 201, version.text
        assert (version.json()["version"], version.json()["is_default"]) == (2, False)
        listed = {s["id"] for s in http.get(f"{server.url}/v1/skills").json()["skills"]}
        assert not {f"ghost-{d}" for d in range(1, 7)} & listed and "SMUGGLED" not in str(listed)
        two = http.get(f"{server.url}/v1/skills/target@2").json()
        assert two["description"] == "The real target."
        assert "tools/target/SKILL.md" in [f["path"] for f in two["files"]]
        assert http.get(f"{server.url}/v1/skills/target@2/files/tools/target/data.txt").content == b"evil"
        assert http.get(f"{server.url}/v1/skills/target/files/data.txt").content == b"real"


def test_the_cli_install_cannot_smuggle_a_skill_into_the_servers_catalog(server: Server, tmp_path: Path) -> None:
    archive = tmp_path / "carrier.zip"
    archive.write_bytes(as_zip(package("a-cli")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
    env |= {"SKILL_EXECUTOR_DATA_DIR": str(server.data_dir), "SKILL_EXECUTOR_SKILLS_DIRS": str(server.skills_dir)}
    out = subprocess.run(
        [sys.executable, "-m", "skill_executor.cli.main", "skills", "install", str(archive)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["id"] == "a-cli"
    with httpx.Client(timeout=60) as http:
        listed = {s["id"] for s in http.get(f"{server.url}/v1/skills").json()["skills"]}
        assert "a-cli" in listed and not {f"ghost-{d}" for d in range(1, 7)} & listed
        assert http.get(f"{server.url}/v1/skills/target").json()["description"] == "The real target."


def test_runs_of_the_shadowed_names_run_the_registrys_skills(server: Server) -> None:
    with httpx.Client(timeout=120) as http:
        http.post(f"{server.url}/v1/skills", content=as_zip(package("a-run"))).raise_for_status()
        ran = http.post(f"{server.url}/v1/runs", json={"skill": "target", "command": "cat data.txt"}).json()
        assert (ran["stdout"], ran["skill_version"]) == ("real", 1), ran
        shipped = http.post(f"{server.url}/v1/runs", json={"skill": "math-tools", "command": "cat SKILL.md"}).json()
        assert "SMUGGLED" not in shipped["stdout"] and shipped["exit_code"] == 0
        ghost = http.post(f"{server.url}/v1/runs", json={"skill": "ghost-1", "command": "true"})
        assert (ghost.status_code, ghost.json()["error"]["code"]) == (404, "skill_not_found")
        carrier = http.post(
            f"{server.url}/v1/runs",
            json={"skill": "a-run", "command": "cat tools/target/data.txt d1/d2/d3/d4/d5/d6/data.txt"},
        ).json()
        assert carrier["stdout"] == "evilsmuggled 6", carrier  # plain files of the carrier, where it put them


# -- the install root and the layout, in process -------------------------------------------


def test_the_install_root_is_not_walked_and_a_misnamed_folder_is_no_skill(tmp_path: Path) -> None:
    shipped, installed = tmp_path / "shipped", tmp_path / "data" / "skills"
    make_skill(shipped, "team/deep/shipped-one", "name: shipped-one\ndescription: Shipped, nested.")
    make_skill(installed, "mine", "name: mine\ndescription: Installed.")
    make_skill(installed, "mine/sub/inner", "name: inner\ndescription: SMUGGLED.")
    make_skill(installed, "placed", "name: other-name\ndescription: SMUGGLED placed by hand.")
    (installed / "alias").symlink_to(installed / "mine", target_is_directory=True)
    database = open_database("sqlite", tmp_path)
    repository = SkillRepository(
        [shipped],
        install_root=installed,
        refresh_interval=0,
        registry=Registry(tmp_path / "data" / "registry", database=database),
        service_dirs=[tmp_path / "data"],
    )
    catalog = repository.reload()
    assert sorted(s.id for s in catalog.skills) == ["mine", "shipped-one"]  # read-only roots stay recursive
    assert [(r.path.name, r.diagnostics[0].code) for r in catalog.rejected] == [("placed", "install-dir-mismatch")]
    for name in ("inner", "other-name", "placed", "alias"):
        with pytest.raises(ExecutorError) as missing:
            repository.get(name)
        assert missing.value.code == "skill_not_found"


@pytest.mark.parametrize(
    "layout, code",
    [
        ({"skills": "data/shipped"}, "skills_root_overlaps"),  # a read-only root inside the data folder
        ({"data": "shipped/data", "install": "up"}, "skills_root_overlaps"),  # ... or holding it
        ({"workspaces": "shipped/ws"}, "skills_root_overlaps"),  # runs' workspaces inside a read-only root
        ({"install": "data"}, "install_root_overlaps"),  # an upload named "registry" would replace the registry
        ({"install": "."}, "install_root_overlaps"),
        ({"install": "shipped/up"}, "install_root_overlaps"),
    ],
)
def test_layouts_that_let_tenants_reach_a_read_only_root_are_refused(
    tmp_path: Path, layout: dict[str, str], code: str
) -> None:
    skills = tmp_path / layout.get("skills", "shipped")
    data = tmp_path / layout.get("data", "data")
    install = tmp_path / layout.get("install", "data/skills")
    workspaces = tmp_path / layout.get("workspaces", "data/workspaces")
    with pytest.raises(ExecutorError) as refused:
        check_layout([skills], install, [data / "registry", data, workspaces])
    assert refused.value.code == code


def test_the_service_refuses_a_data_folder_inside_a_skills_root_before_writing_anything(tmp_path: Path) -> None:
    srv = Server(
        tmp_path,
        env={"SKILL_EXECUTOR_RUNTIME": "local", "SKILL_EXECUTOR_WORKSPACE_ROOT": str(tmp_path / "skills" / "ws")},
    )
    with pytest.raises(RuntimeError) as info:
        srv.start()
    assert "skills_root_overlaps" in str(info.value) or "overlaps the service's folder" in str(info.value)
    assert not (tmp_path / "skills" / "ws").exists()
    inside = Server(
        tmp_path / "two",
        env={"SKILL_EXECUTOR_RUNTIME": "local", "SKILL_EXECUTOR_INSTALL_DIR": str(tmp_path / "two" / "data")},
    )
    with pytest.raises(RuntimeError) as info:
        inside.start()
    assert "holds the service's folder" in str(info.value)
