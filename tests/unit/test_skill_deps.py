"""Per-skill dependencies (issue 12): what a skill declares (requirements files, pyproject,
PEP 723 script blocks, package.json), what the runner image already provides, the
content-addressed environment the rest is resolved into on the host -- from a local
wheelhouse and npm tarball folder here, never PyPI or npm -- and what runs see of it
(``PYTHONPATH``/``NODE_PATH``, a read-only mount, still no network)."""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import io
import json
import os
import shlex
import subprocess
import sys
import tarfile
import threading
import urllib.request
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import InvalidRequirement

from skill_executor.config import Settings
from skill_executor.core import Executor
from skill_executor.envs import (
    MANIFEST,
    DependenciesUnmet,
    ImagePackages,
    SkillEnvs,
    Sources,
    declared,
    env_key,
    normalise_requirement,
    npm_range_accepts,
    parse_package_json,
    parse_pyproject,
    parse_requirements,
    parse_script,
    plan,
    with_documented,
)
from skill_executor.errors import ExecutorError
from skill_executor.image.inputs import images_dir
from skill_executor.workspace.layout import environment

from ..helpers import make_skill, run

IMAGE = ImagePackages.load(images_dir() / "runner")
#: The tests that are not about who runs pip and npm run them as the service itself: a root
#: test run keeps its temporary folders (and maybe its interpreter) private to root, where
#: the default unprivileged user cannot read them (tests/unit/test_hosttools.py and the tests
#: below that use ``open_tmp`` run them as that user).
AS_SERVICE: dict[str, object] = {"host_tools_user": "root"}


# -- building a wheelhouse and an npm tarball folder by hand (no network) -------------


def make_wheel(folder: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A pure-Python ``py3-none-any`` wheel, written like any build backend would."""
    dist = f"{name}-{version}.dist-info"
    entries = {
        **files,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    for path, content in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(content.encode()).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(content.encode())}\n"
    entries[f"{dist}/RECORD"] = record + f"{dist}/RECORD,,\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, content in entries.items():
            archive.writestr(path, content)
    return wheel


def make_tarball(folder: Path, name: str, version: str, index: str) -> Path:
    """An npm package tarball as ``npm pack`` makes it (``package/`` prefix)."""
    tgz = folder / f"{name}-{version}.tgz"
    with tarfile.open(tgz, "w:gz") as archive:
        for path, content in {
            "package/package.json": json.dumps({"name": name, "version": version, "main": "index.js"}),
            "package/index.js": index,
        }.items():
            data = content.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    return tgz


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Path:
    folder = tmp_path / "wheelhouse"
    folder.mkdir()
    make_wheel(folder, "tinypkg", "1.0.0", {"tinypkg/__init__.py": "VALUE = 42\n"})
    make_tarball(folder, "tinynode", "1.0.0", "module.exports = 42;\n")
    return folder


def dep_skill(root: Path, name: str, *, requirements: str = "", package: dict[str, str] | None = None) -> Path:
    skill = make_skill(root, name, f"name: {name}\ndescription: declares dependencies")
    if requirements:
        (skill / "requirements.txt").write_text(requirements)
    if package is not None:
        (skill / "package.json").write_text(json.dumps({"name": name, "dependencies": package}))
    return skill


def skill_zip(name: str, requirements: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr(f"{name}/SKILL.md", f"---\nname: {name}\ndescription: declares needs\n---\n# {name}\n")
        archive.writestr(f"{name}/requirements.txt", requirements)
    return buf.getvalue()


# -- reading the five sources -------------------------------------------------------


def test_requirements_lines_options_and_refusals() -> None:
    text = (
        "# a comment\n"
        "Tiny_Pkg[B,a] >= 1.0  # trailing comment\n"
        "-r other.txt\n"
        "--index-url https://example.invalid/simple\n"
        "hashed==2.0 \\\n"
        "    --hash=sha256:0123\n"
        "-e ./local\n"
        "https://example.invalid/x.whl\n"
        "named @ https://example.invalid/y.tar.gz\n"
        "./vendored\n"
        "not a requirement!\n"
        "marked; python_version < '3'\n"
    )
    needs, findings = parse_requirements(text, "requirements.txt")
    assert needs == ["tiny-pkg[a,b]>=1.0", "hashed==2.0", 'marked; python_version < "3"']
    refused = {f.need: f.message for f in findings}
    assert set(refused) == {
        "-e ./local",
        "https://example.invalid/x.whl",
        "named @ https://example.invalid/y.tar.gz",
        "./vendored",
        "not a requirement!",
    }
    assert refused["-e ./local"] == "editable installs are not allowed"
    assert all(f.source == "requirements.txt" for f in findings)


def test_pyproject_dependencies() -> None:
    needs, findings = parse_pyproject(
        '[project]\nname = "x"\ndependencies = ["Requests>=2", "attrs"]\n', "pyproject.toml"
    )
    assert (needs, findings) == (["requests>=2", "attrs"], [])
    assert parse_pyproject("[tool.x]\n", "pyproject.toml") == ([], [])
    _, bad = parse_pyproject("[project\n", "pyproject.toml")
    assert bad and bad[0].message.startswith("not valid TOML")


def test_pep723_script_block() -> None:
    script = (
        "#!/usr/bin/env python3\n"
        "# /// script\n"
        '# requires-python = ">=3.11"\n'
        "# dependencies = [\n"
        '#   "rich>=13",\n'
        '#   "tinypkg",\n'
        "# ]\n"
        "# ///\n"
        "import rich\n"
    )
    assert parse_script(script, "scripts/a.py") == (["rich>=13", "tinypkg"], [])
    assert parse_script("print('no block')\n", "scripts/b.py") == ([], [])
    twice = "# /// script\n# dependencies = []\n# ///\nx = 1\n" * 2
    _, findings = parse_script(twice, "scripts/c.py")
    assert findings and "more than one" in findings[0].message


def test_package_json_dependencies() -> None:
    text = json.dumps(
        {
            "dependencies": {
                "left-pad": "^1.3.0",
                "@scope/pkg": "~2.1",
                "any": "",
                "gitdep": "git+https://example.invalid/x.git",
                "local": "file:../x",
                "alias": "npm:other@1",
            }
        }
    )
    needs, findings = parse_package_json(text, "package.json")
    assert needs == ["left-pad@^1.3.0", "@scope/pkg@~2.1", "any@*"]
    assert sorted(f.need for f in findings) == [
        "alias@npm:other@1",
        "gitdep@git+https://example.invalid/x.git",
        "local@file:../x",
    ]


def test_declared_reads_every_source_sorted(tmp_path: Path) -> None:
    skill = make_skill(tmp_path, "all-sources", "name: all-sources\ndescription: d")
    (skill / "scripts" / "deep").mkdir(parents=True)
    (skill / "requirements.txt").write_text("zeta\n")
    (skill / "scripts/requirements.txt").write_text("alpha>=1\nzeta\n")
    (skill / "pyproject.toml").write_text('[project]\nname = "s"\ndependencies = ["Mid_Pkg"]\n')
    (skill / "scripts/deep/tool.py").write_text('# /// script\n# dependencies = ["beta"]\n# ///\n')
    (skill / "package.json").write_text(json.dumps({"dependencies": {"tinynode": "1.0.0"}}))
    # as published skills keep them beside their scripts
    (skill / "scripts/pyproject.toml").write_text('[project]\nname = "t"\ndependencies = ["gamma<2"]\n')
    (skill / "scripts/package.json").write_text(json.dumps({"dependencies": {"othernode": "^2.1.0"}}))
    (skill / "node_modules").mkdir()
    (skill / "node_modules/ignored.py").write_text('# /// script\n# dependencies = ["ignored"]\n# ///\n')
    needs = declared(skill)
    assert needs.python == ("alpha>=1", "beta", "gamma<2", "mid-pkg", "zeta")
    assert needs.node == ("othernode@^2.1.0", "tinynode@1.0.0")
    assert needs.findings == ()
    assert needs.sources == (
        "package.json",
        "pyproject.toml",
        "requirements.txt",
        "scripts/deep/tool.py",
        "scripts/package.json",
        "scripts/pyproject.toml",
        "scripts/requirements.txt",
    )
    assert not declared(make_skill(tmp_path, "none", "name: none\ndescription: d"))


# -- what the image provides, and keys -------------------------------------------------


def test_image_provided_detection() -> None:
    numpy = str(IMAGE.python["numpy"][0])
    major = numpy.split(".")[0]
    assert IMAGE.provides_python("numpy")
    assert IMAGE.provides_python(f"numpy>={major}")
    assert IMAGE.provides_python(f"NumPy=={numpy}")
    assert not IMAGE.provides_python(f"numpy<{major}")
    assert IMAGE.provides_python("markitdown[docx]")  # the image pins markitdown with that extra
    assert not IMAGE.provides_python("markitdown[no-such-extra]")
    assert not IMAGE.provides_python("tinypkg")
    docx = IMAGE.node["docx"]
    assert IMAGE.provides_node(f"docx@^{docx.split('.')[0]}.0.0") and IMAGE.provides_node("docx@*")
    assert not IMAGE.provides_node("docx@^1.0.0") and not IMAGE.provides_node("tinynode@*")
    needs = declared_from(
        python=("numpy", "tinypkg>=1", 'winonly; sys_platform == "win32"'), node=("docx@*", "tinynode@^1.0.0")
    )
    planned = plan(needs, IMAGE, Sources())
    assert planned.provided == ("numpy", "docx@*")
    assert planned.python == ("tinypkg>=1",) and planned.node == ("tinynode@^1.0.0",)  # the win32 need does not apply
    assert plan(declared_from(python=("numpy",)), IMAGE, Sources()).key is None  # nothing left: no environment


def declared_from(python: tuple[str, ...] = (), node: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    from skill_executor.envs import Needs

    return Needs(python, node)


@pytest.mark.parametrize(
    ("spec", "version", "ok"),
    [
        ("^1.2.3", "1.9.0", True),
        ("^1.2.3", "2.0.0", False),
        ("^0.2.3", "0.2.9", True),
        ("^0.2.3", "0.3.0", False),
        ("~1.2.3", "1.2.9", True),
        ("~1.2.3", "1.3.0", False),
        (">=1 <2", "1.5.0", True),
        (">=1 <2", "2.0.0", False),
        ("1.x", "1.4.0", True),
        ("1.2.3", "1.2.3", True),
        ("1.2.3", "1.2.4", False),
        ("1 - 2", "2.1.0", True),
        ("<1 || >=3", "3.0.0", True),
        ("<1 || >=3", "2.0.0", False),
        ("*", "9.9.9", True),
        ("weird-range", "1.0.0", False),
    ],
)
def test_npm_ranges(spec: str, version: str, ok: bool) -> None:
    assert npm_range_accepts(spec, version) is ok


def test_keys_cover_needs_image_and_sources(tmp_path: Path) -> None:
    key = env_key(["b", "a"], ["n@1"], IMAGE, Sources())
    assert key == env_key(["a", "b"], ["n@1"], IMAGE, Sources())  # order does not matter
    assert key != env_key(["a"], ["n@1"], IMAGE, Sources())
    assert key != env_key(["a", "b"], ["n@2"], IMAGE, Sources())
    assert key != env_key(["a", "b"], ["n@1"], IMAGE, Sources(wheelhouse=tmp_path))
    assert key != env_key(["a", "b"], ["n@1"], ImagePackages(), Sources())


def test_environment_variables() -> None:
    plain = environment("/workspace", "s")
    assert plain["PYTHONPATH"] == "/workspace/skills/s:/workspace/skills/s/scripts" and "NODE_PATH" not in plain
    with_env = environment("/workspace", "s", "/opt/skill-envs/k")
    assert with_env["PYTHONPATH"] == "/workspace/skills/s:/workspace/skills/s/scripts:/opt/skill-envs/k/python"
    assert with_env["NODE_PATH"] == "/opt/skill-envs/k/node/node_modules:/usr/local/lib/node_modules"


# -- resolving on the host --------------------------------------------------------------


def test_resolution_is_atomic_immutable_and_refuses_unmet_needs(tmp_path: Path, wheelhouse: Path) -> None:
    envs = SkillEnvs(tmp_path / "envs", sources=Sources(wheelhouse=wheelhouse, npm_wheelhouse=wheelhouse), image=IMAGE)
    skill = dep_skill(tmp_path / "skills", "good", requirements="tinypkg>=1\nnumpy\n", package={"tinynode": "^1.0.0"})
    key = envs.for_run(skill)
    assert key is not None
    env = envs.path(key)
    manifest = json.loads((env / MANIFEST).read_text())
    assert manifest["provided_by_image"] == ["numpy"]
    assert manifest["resolved"] == {"python": {"tinypkg": "1.0.0"}, "node": {"tinynode": "1.0.0"}}
    assert (env / "python/tinypkg/__init__.py").read_text() == "VALUE = 42\n"
    assert (env / "node/node_modules/tinynode/index.js").is_file()
    assert not (env / "python/numpy").exists()  # the image's numpy is not installed again
    assert sorted(os.listdir(tmp_path / "envs")) == [key]  # no build folder left
    # In place, it is used as is (not rebuilt) by every skill with the same needs.
    stamp = (env / MANIFEST).stat().st_mtime_ns
    twin = dep_skill(tmp_path / "skills", "twin", requirements="numpy\ntinypkg>=1\n", package={"tinynode": "^1.0.0"})
    assert envs.for_run(twin) == key and (env / MANIFEST).stat().st_mtime_ns == stamp

    bad = dep_skill(
        tmp_path / "skills",
        "bad",
        requirements="tinypkg>=1\nno-such-package==9\n",
        package={"tinynode": "^1.0.0", "no-such-node": "^1.0.0"},
    )
    with pytest.raises(DependenciesUnmet) as info:
        envs.for_run(bad)
    error = info.value
    assert (error.status, error.code) == (422, "skill_dependencies_unmet")
    assert [item["need"] for item in error.details["unmet"]] == ["no-such-package==9"]
    assert any("no-such-package" in line for line in error.details["log"])
    assert sorted(os.listdir(tmp_path / "envs")) == [key]  # a failed resolution leaves nothing
    # The failure is remembered for the skill's current content, and retried once it changes.
    make_wheel(wheelhouse, "no_such_package", "9", {"no_such_package/__init__.py": ""})
    with pytest.raises(DependenciesUnmet):
        envs.for_run(bad)
    (bad / "requirements.txt").write_text("tinypkg>=1\nno-such-package==9  # now in the wheelhouse\n")
    os.utime(bad / "requirements.txt", ns=(1, 1))
    with pytest.raises(DependenciesUnmet) as info:  # now only the npm need is missing
        envs.for_run(bad)
    assert [item["need"] for item in info.value.details["unmet"]] == ["no-such-node@^1.0.0"]


def test_refused_declarations_fail_without_resolving(tmp_path: Path) -> None:
    envs = SkillEnvs(tmp_path / "envs", sources=Sources(wheelhouse=tmp_path), image=IMAGE)
    skill = dep_skill(tmp_path / "skills", "editable", requirements="-e .\n")
    with pytest.raises(DependenciesUnmet) as info:
        envs.for_run(skill)
    assert info.value.details["unmet"] == [
        {"source": "requirements.txt", "need": "-e .", "error": "editable installs are not allowed"}
    ]
    off = SkillEnvs(tmp_path / "envs-off", mode="off", image=IMAGE)
    assert off.for_run(skill) is None  # off: never resolved, runs get no environment


def test_install_refuses_unmet_needs_with_422(tmp_path: Path, wheelhouse: Path) -> None:
    from skill_executor.api.app import create_app

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # starlette's TestClient warns about its httpx use
        from starlette.testclient import TestClient
    settings = Settings(
        runtime="local",
        skills_dirs=[tmp_path / "skills"],
        data_dir=tmp_path / "data",
        skills_refresh_seconds=0.0,
        wheelhouse=wheelhouse,
        npm_wheelhouse=wheelhouse,
        **AS_SERVICE,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = TestClient(create_app(settings), base_url="http://127.0.0.1", client=("127.0.0.1", 50000))
    with client:
        response = client.post(
            "/v1/skills",
            content=skill_zip("unmet", "tinypkg\nno-such-package>=1\n"),
            headers={"content-type": "application/zip"},
        )
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "skill_dependencies_unmet"
        assert [item["need"] for item in error["details"]["unmet"]] == ["no-such-package>=1"]
        assert client.get("/v1/skills/unmet").status_code == 404
        assert [p for p in (tmp_path / "data/skills").iterdir()] == []  # nothing installed, no staging left
        assert [p.name for p in (tmp_path / "data/envs").iterdir()] == []
        response = client.post(
            "/v1/skills", content=skill_zip("met", "tinypkg\n"), headers={"content-type": "application/zip"}
        )
        assert response.status_code == 201, response.text
        assert [p.name for p in (tmp_path / "data/skills").iterdir()] == ["met"]
        assert len(list((tmp_path / "data/envs").iterdir())) == 1


# -- runs on every runtime -------------------------------------------------------------

PROBE = (
    "python3 -c 'import tinypkg; print(\"py\", tinypkg.VALUE)'"
    ' && node -e \'console.log("node", require("tinynode"))\''
    ' && echo "$PYTHONPATH" && echo "$NODE_PATH"'
)
#: On Docker the env sits beside the image's own packages (numpy, docx).
IMAGE_PROBE = "python3 -c 'import tinypkg, numpy' && node -e 'require(\"tinynode\"); require(\"docx\")' && echo both"
NETWORK = (
    "python3 - \"$INDEX\" <<'EOF'\n"
    "import sys, urllib.request\n"
    "try:\n"
    "    urllib.request.urlopen(sys.argv[1], timeout=3); print('reached the index')\n"
    "except Exception as exc:\n"
    "    print('no index:', type(exc).__name__)\n"
    "EOF\n"
    "ls /sys/class/net\n"
    "touch /opt/skill-envs/x 2>/dev/null && echo 'envs writable' || echo 'envs read-only'"
)


@pytest.fixture
def index_server(wheelhouse: Path) -> Iterator[str]:
    """The wheelhouse served over HTTP on the host's loopback (a pip ``--find-links`` page)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(wheelhouse))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_runs_import_the_skill_env(
    make_executor,
    runtime_name: str,
    wheelhouse: Path,  # type: ignore[no-untyped-def]
    extra_skills: Path,
    index_server: str,
) -> None:
    dep_skill(extra_skills, "dep-probe", requirements="tinypkg>=1\n", package={"tinynode": "^1.0.0"})
    plain = make_skill(extra_skills, "no-deps", "name: no-deps\ndescription: declares nothing")
    (plain / "scripts").mkdir()
    (plain / "scripts/helper.py").write_text("X = 7\n")
    (plain / "scripts/main.py").write_text("from scripts.helper import X\nprint('x', X)\n")
    executor: Executor = make_executor(wheelhouse=wheelhouse, npm_wheelhouse=wheelhouse, **AS_SERVICE)
    result = run(executor, skill="dep-probe", command=PROBE)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["py 42", "node 42"]
    key = os.listdir(executor.settings.envs_dir)[0]
    base = "/opt/skill-envs" if runtime_name != "local" else str(executor.settings.envs_dir)
    skill_dir = lines[2].split(":")[0]
    assert (
        skill_dir.endswith("/skills/dep-probe") and lines[2] == f"{skill_dir}:{skill_dir}/scripts:{base}/{key}/python"
    )
    assert lines[3].startswith(f"{base}/{key}/node/node_modules:")
    # A skill without needs: its root is importable (a script run by path), no env.
    result = run(executor, skill="no-deps", command='python3 scripts/main.py && echo "${NODE_PATH:-unset}"')
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[0] == "x 7"
    # A request's own env wins.
    result = run(executor, skill="dep-probe", command="echo $PYTHONPATH", env={"PYTHONPATH": "/mine"})
    assert result.stdout == "/mine\n"
    # ESM `import` (which ignores NODE_PATH) finds the env's modules too, from the skill's scripts
    esm = "import value from 'tinynode';\nconsole.log('esm', value);\n"
    result = run(
        executor,
        skill="dep-probe",
        command=f"mkdir -p scripts && printf %s {shlex.quote(esm)} > scripts/e.mjs && node scripts/e.mjs",
    )
    assert (result.exit_code, result.stdout) == (0, "esm 42\n"), result.stderr
    if runtime_name == "local":
        return
    result = run(executor, skill="dep-probe", command=IMAGE_PROBE)
    assert (result.exit_code, result.stdout) == (0, "both\n"), result.stderr
    # Still no network in the sandbox, and the environments are read-only there.
    with urllib.request.urlopen(index_server, timeout=5) as page:  # the host reaches its index ...
        assert b"tinypkg-1.0.0-py3-none-any.whl" in page.read()
    result = run(executor, skill="dep-probe", command=NETWORK, env={"INDEX": index_server})
    lines = result.stdout.splitlines()
    assert lines[0].startswith("no index:"), result.stdout  # ... a run does not
    if not runtime_name.endswith("runsc"):
        assert lines[1:-1] == ["lo"]  # no interface but loopback
    assert lines[-1] == "envs read-only"


def test_a_run_of_a_skill_with_unmet_needs_fails_with_the_error(
    make_executor,
    runtime_name: str,  # type: ignore[no-untyped-def]
    wheelhouse: Path,
    extra_skills: Path,
) -> None:
    if runtime_name != "docker":
        pytest.skip("one runtime is enough: the refusal comes before any sandbox")
    dep_skill(extra_skills, "dep-broken", requirements="no-such-package\n")
    executor: Executor = make_executor(wheelhouse=wheelhouse, npm_wheelhouse=wheelhouse, **AS_SERVICE)
    with pytest.raises(ExecutorError) as info:
        run(executor, skill="dep-broken", command="true")
    assert info.value.code == "skill_dependencies_unmet"
    assert os.listdir(executor.runner.workspaces.runs) == []  # refused before any workspace
    off: Executor = make_executor(skill_deps="off", data_dir=executor.settings.data_dir.parent / "data-off")
    assert run(off, skill="dep-broken", command="echo ran").stdout == "ran\n"


def test_concurrent_resolvers_of_one_key_share_the_winner(tmp_path: Path, wheelhouse: Path) -> None:
    """Two resolvers (as two processes would: no shared lock) build the same key at once:
    one environment ends up in place, the loser's build folder is gone."""
    sources = Sources(wheelhouse=wheelhouse, npm_wheelhouse=wheelhouse)
    skill = dep_skill(tmp_path / "skills", "racer", requirements="tinypkg\n")
    resolvers = [SkillEnvs(tmp_path / "envs", sources=sources, image=IMAGE) for _ in range(2)]
    keys: list[str | None] = []
    threads = [threading.Thread(target=lambda r=r: keys.append(r.for_run(skill))) for r in resolvers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(keys) == 2 and keys[0] == keys[1] and keys[0] is not None
    assert os.listdir(tmp_path / "envs") == [keys[0]]
    assert (tmp_path / "envs" / keys[0] / "python/tinypkg/__init__.py").is_file()


def test_cli_install_refuses_unmet_needs(tmp_path: Path, wheelhouse: Path) -> None:
    package = tmp_path / "unmet.zip"
    package.write_bytes(skill_zip("cli-unmet", "tinypkg\nno-such-package\n"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
    env |= {
        "SKILL_EXECUTOR_DATA_DIR": str(tmp_path / "data"),
        "SKILL_EXECUTOR_SKILLS_DIRS": str(tmp_path / "none"),
        "SKILL_EXECUTOR_WHEELHOUSE": str(wheelhouse),
        "SKILL_EXECUTOR_HOST_TOOLS_USER": "root",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "skill_executor.cli.main", "skills", "install", str(package)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("skill-executor: skill_dependencies_unmet: ")
    assert "  unmet: no-such-package (python): pip could not resolve it" in proc.stderr
    assert not (tmp_path / "data/skills/cli-unmet").exists()


@pytest.mark.parametrize(
    "text",
    [
        "foo===${HOME}",
        'bar; os_name != "${PATH}"',
        "baz; platform_release != 'x\u000c--index-url http://evil/'",
        "qux\u2028-r /etc/hostname",
    ],
)
def test_needs_that_pip_would_expand_or_split_are_refused(text: str) -> None:
    """pip expands ${VAR} in requirement files and splits lines on every Unicode break:
    such a need could read the service's environment back or smuggle an option."""
    with pytest.raises(InvalidRequirement):
        normalise_requirement(text)


def test_sources_in_manifests_carry_no_credentials() -> None:
    sources = Sources(index_url="https://user:s3cret@pypi.example/simple", npm_registry="https://token@npm.example/")
    described = sources.describe()
    assert described["index_url"] == "https://pypi.example/***"
    assert described["npm_registry"] == "https://npm.example/"
    assert "s3cret" not in json.dumps(described)
    # a token is as often a path segment or the query: only scheme and host are ever kept
    for index in ("https://pypi.example/simple/t0ken-in-path/", "https://pypi.example/t0ken-in-path/simple"):
        for shown in (Sources(index_url=index).describe(), Sources(npm_registry=index).describe()):
            assert "https://pypi.example/***" in shown.values() and "t0ken" not in json.dumps(shown)
    query = Sources(index_url="https://PyPI.example:8443/simple?token=t0ken", npm_registry="https://npm.example")
    assert query.describe()["index_url"] == "https://pypi.example:8443/***"
    assert query.describe()["npm_registry"] == "https://npm.example"  # nothing to hide
    assert Sources(index_url="not a url: t0ken").describe()["index_url"] == "***"


def test_install_lines_of_skill_md_are_needs_when_configured(
    make_executor,
    runtime_name: str,
    wheelhouse: Path,  # type: ignore[no-untyped-def]
    extra_skills: Path,
) -> None:
    """Many published skills declare their packages only as an install line in SKILL.md
    (``uv pip install x``): with SKILL_EXECUTOR_SKILL_DEPS_FROM_DOCS they are resolved at
    install like declared ones (an untagged or broken line is a guess: not resolved)."""
    skill = make_skill(
        extra_skills,
        "prose-deps",
        "name: prose-deps\ndescription: declares in prose",
        body="## Installation\n```bash\nuv pip install tinypkg numpy\n```\n```\npip install nosuch-guess\n```\n",
    )
    assert with_documented(declared(skill), skill).python == ("numpy", "tinypkg")
    assert with_documented(declared(skill), skill).sources == ("SKILL.md",)
    plain: Executor = make_executor(wheelhouse=wheelhouse, npm_wheelhouse=wheelhouse, **AS_SERVICE)
    result = run(plain, skill="prose-deps", command="python3 -c 'import tinypkg'")
    assert result.exit_code == 1 and "No module named 'tinypkg'" in result.stderr  # off by default
    plain.close()
    executor: Executor = make_executor(
        wheelhouse=wheelhouse, npm_wheelhouse=wheelhouse, skill_deps_from_docs=True, **AS_SERVICE
    )
    result = run(executor, skill="prose-deps", command="python3 -c 'import tinypkg; print(tinypkg.VALUE)'")
    assert result.exit_code == 0 and result.stdout == "42\n", result.stderr
