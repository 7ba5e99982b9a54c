"""Resolving a skill's dependencies, attacked by the skill's author: a hostile checkout as
the service's working directory, a hostile environment around the service, hostile
packages in the wheelhouse and the npm folder -- nothing may run on the host -- and a
private index's credentials, which may reach pip but nothing a run, a refusal or a log
shows."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import logging
import os
import stat
import subprocess
import sys
import tarfile
import threading
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from skill_executor.config import Settings
from skill_executor.core import Executor
from skill_executor.envs import (
    MANIFEST,
    SkillEnvs,
    Sources,
    declared,
    parse_package_json,
    safe_npm_spec,
    safe_python_need,
)
from skill_executor.envs.hosttools import PASSED, tool_user
from skill_executor.errors import ExecutorError

from .. import untrusted
from ..conftest import make_settings
from ..helpers import run
from ..unit.test_skill_deps import AS_SERVICE, IMAGE, dep_skill, make_tarball, make_wheel, skill_zip
from ..untrusted import AS_ROOT, TOOL_USER, Markers, python_for, usable_by

open_tmp, markers = untrusted.open_tmp, untrusted.markers  # fixtures


def wheelhouse_in(folder: Path) -> Path:
    wheels = folder / "wheelhouse"
    wheels.mkdir(mode=0o755)
    make_wheel(wheels, "tinypkg", "1.0.0", {"tinypkg/__init__.py": "VALUE = 42\n"})
    make_tarball(wheels, "tinynode", "1.0.0", "module.exports = 42;\n")
    for path in wheels.iterdir():
        path.chmod(0o644)
    return wheels


def hostile_checkout(root: Path, markers: Markers) -> Path:
    """A skill's checkout that attacks every tool started in it (or with it as HOME)."""
    checkout = root / "checkout"
    files = {
        "SKILL.md": "---\nname: hostile-deps\ndescription: attacks its resolver\n---\n# x\n",
        "requirements.txt": "tinypkg\n",
        "package.json": json.dumps({"name": "hostile-deps", "dependencies": {"tinynode": "^1.0.0"}}),
        "pip/__init__.py": markers.python("pip-package"),
        "pip/__main__.py": markers.python("pip-main"),
        "sitecustomize.py": markers.python("sitecustomize"),
        "usercustomize.py": markers.python("usercustomize"),
        "evil.pth": f"import os; {markers.python('pth')}\n",
        "pip.conf": "[global]\nindex-url = http://127.0.0.1:9/simple\nfind-links = http://127.0.0.1:9/\n",
        ".config/pip/pip.conf": "[global]\nindex-url = http://127.0.0.1:9/simple\n",
        ".pip/pip.conf": "[global]\nindex-url = http://127.0.0.1:9/simple\n",
        "uv.toml": 'index-url = "http://127.0.0.1:9/simple"\n',
        ".npmrc": (
            f"registry=http://127.0.0.1:9/\noffline=false\nignore-scripts=false\n"
            f"script-shell={root}/checkout/evil.sh\nnode-options=--require {root}/checkout/evil.js\n"
        ),
        "evil.js": markers.js("node-options"),
        "evil.sh": markers.shell("script-shell"),
        "node_modules/.bin/node": markers.shell("node-shadow"),
        "node_modules/.bin/python3": markers.shell("python-shadow"),
        "node_modules/.bin/sh": markers.shell("sh-shadow"),
    }
    for rel, text in files.items():
        path = checkout / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755 if rel.endswith((".sh", "node", "python3", "/sh")) else 0o644)
    for folder in [checkout, *[p for p in checkout.rglob("*") if p.is_dir()]]:
        folder.chmod(0o755)
    return checkout


def hostile_environment(checkout: Path) -> dict[str, str]:
    """The service's own environment as a CI job set up by the skill's repository could make it."""
    return {
        "PATH": f"{checkout}/node_modules/.bin:{os.environ['PATH']}",  # as `npm run` makes it
        "HOME": str(checkout),
        "NODE_OPTIONS": f"--require {checkout}/evil.js",
        "npm_config_ignore_scripts": "false",
        "npm_config_userconfig": str(checkout / ".npmrc"),
        "npm_config_registry": "http://127.0.0.1:9/",
        "PIP_CONFIG_FILE": str(checkout / "pip.conf"),
        "PIP_FIND_LINKS": "http://127.0.0.1:9/",
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_NO_INDEX": "0",
        "UV_CONFIG_FILE": str(checkout / "uv.toml"),
        "AWS_SECRET_ACCESS_KEY": "aws-secret-value",
    }


@pytest.mark.parametrize("user", ["root", TOOL_USER])
def test_a_hostile_checkout_and_environment_run_nothing_on_the_host(
    open_tmp: Path, markers: Markers, user: str
) -> None:
    """``skill-executor skills install`` run from the skill's own checkout (as CI does) in
    an environment the checkout poisoned: pip and npm still resolve from the configured
    folders, and nothing of the checkout runs -- as the service's user too."""
    if user != "root" and AS_ROOT and not usable_by(user, [sys.executable, "-I", "-c", "import pip"]):
        pytest.skip(
            f"{user} cannot run this interpreter ({sys.executable}); "
            "test_hostile_packages_run_nothing_on_the_host runs pip as that user"
        )
    checkout = hostile_checkout(open_tmp, markers)
    wheels = wheelhouse_in(open_tmp)
    package = open_tmp / "hostile-deps.zip"
    with zipfile.ZipFile(package, "w") as archive:  # the checkout itself, as the skill's package
        for path in sorted(checkout.rglob("*")):
            if path.is_file():
                archive.write(path, f"hostile-deps/{path.relative_to(checkout)}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
    env |= hostile_environment(checkout)
    env |= {
        "SKILL_EXECUTOR_DATA_DIR": str(open_tmp / "data"),
        "SKILL_EXECUTOR_SKILLS_DIRS": str(open_tmp / "none"),
        "SKILL_EXECUTOR_WHEELHOUSE": str(wheels),
        "SKILL_EXECUTOR_NPM_WHEELHOUSE": str(wheels),
        "SKILL_EXECUTOR_HOST_TOOLS_USER": user,
        "SKILL_EXECUTOR_LOG_JSON": "false",
    }
    (open_tmp / "data").mkdir(mode=0o755)
    proc = subprocess.run(
        [sys.executable, "-m", "skill_executor.cli.main", "skills", "install", str(package)],
        cwd=checkout,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert markers.found() == []
    [key] = [p.name for p in (open_tmp / "data" / "envs").iterdir()]
    env_dir = open_tmp / "data" / "envs" / key
    assert (env_dir / "python" / "tinypkg" / "__init__.py").read_text() == "VALUE = 42\n"  # from the wheelhouse
    assert (env_dir / "node" / "node_modules" / "tinynode" / "index.js").is_file()
    assert "aws-secret-value" not in proc.stdout + proc.stderr


def test_npm_is_never_found_through_a_relative_path_entry(
    open_tmp: Path, markers: Markers, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = hostile_checkout(open_tmp, markers)
    (checkout / "node_modules/.bin/npm").write_text(markers.shell("npm-shadow"))
    (checkout / "node_modules/.bin/npm").chmod(0o755)
    monkeypatch.chdir(checkout)
    monkeypatch.setenv("PATH", f"node_modules/.bin:.:{os.environ['PATH']}")
    envs = SkillEnvs(open_tmp / "envs", image=IMAGE)
    assert envs.npm is not None and os.path.isabs(envs.npm) and not envs.npm.startswith(str(checkout))


def evil_wheel(folder: Path, markers: Markers) -> Path:
    """A wheel whose installation drops import hooks into the target: a ``.pth``, a
    ``sitecustomize``/``usercustomize``, a console script and a data script."""
    dist = "evilpkg-1.0.0.dist-info"
    return make_wheel(
        folder,
        "evilpkg",
        "1.0.0",
        {
            "evilpkg/__init__.py": markers.python("evilpkg-import"),
            "evilpkg.pth": f"import os; {markers.python('wheel-pth')}\n",
            "sitecustomize.py": markers.python("wheel-sitecustomize"),
            "usercustomize.py": markers.python("wheel-usercustomize"),
            "evilpkg-1.0.0.data/scripts/evil": markers.shell("wheel-data-script"),
            f"{dist}/entry_points.txt": "[console_scripts]\nevil = evilpkg:main\n",
        },
    )


def evil_tarball(folder: Path, markers: Markers) -> Path:
    """An npm package with every lifecycle script and a bin."""
    scripts = {
        hook: f"touch {markers.path('npm-' + hook)}"
        for hook in ("preinstall", "install", "postinstall", "prepare", "preprepare", "postprepare")
    }
    meta = {
        "name": "evilnode",
        "version": "1.0.0",
        "main": "index.js",
        "scripts": scripts,
        "bin": {"evil": "bin/evil.js"},
        "gypfile": True,
    }
    tgz = folder / "evilnode-1.0.0.tgz"
    with tarfile.open(tgz, "w:gz") as archive:
        for path, content in {
            "package/package.json": json.dumps(meta),
            "package/index.js": markers.js("npm-require"),
            "package/bin/evil.js": "#!/usr/bin/env node\n" + markers.js("npm-bin"),
            "package/binding.gyp": "{}",
        }.items():
            data = content.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o755
            archive.addfile(info, io.BytesIO(data))
    return tgz


RECORDER = """#!/bin/sh
{{ echo "uid=$(id -u)"; echo "pwd=$(pwd)"; echo "cwd_entries=$(ls -A | tr '\\n' ' ')"; env | sed 's/^/env:/';
   echo "argv=$*"; echo "--"; }} >> {log}
exec {python} "$@"
"""


def test_hostile_packages_run_nothing_on_the_host(
    open_tmp: Path, markers: Markers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wheel that drops a .pth and sitecustomize into its target, an npm package with
    every lifecycle script: installed as data, never run; pip runs isolated (as the
    unprivileged user when the tests run as root) from a fresh folder, never the
    service's (hostile) working directory."""
    user = tool_user(TOOL_USER)
    python = python_for(TOOL_USER) if user is not None else sys.executable
    if python is None:
        pytest.skip(f"no Python with pip >= 22.2 here that {TOOL_USER} can run")
    wheels = wheelhouse_in(open_tmp)
    evil_wheel(wheels, markers).chmod(0o644)
    evil_tarball(wheels, markers).chmod(0o644)
    log = open_tmp / "calls.log"
    log.write_text("")
    log.chmod(0o666)
    recorder = open_tmp / "python"
    recorder.write_text(RECORDER.format(log=log, python=python))
    recorder.chmod(0o755)
    checkout = hostile_checkout(open_tmp, markers)
    monkeypatch.chdir(checkout)
    for name, value in hostile_environment(checkout).items():
        if name != "PATH":
            monkeypatch.setenv(name, value)
    envs = SkillEnvs(
        open_tmp / "envs",
        sources=Sources(wheelhouse=wheels, npm_wheelhouse=wheels),
        image=IMAGE,
        python=str(recorder),
        user=user,
    )
    skill = dep_skill(
        open_tmp / "skills",
        "evil-needs",
        requirements="evilpkg\ntinypkg\n",
        package={"evilnode": "^1.0.0", "tinynode": "^1.0.0"},
    )
    key = envs.for_run(skill)
    assert key is not None
    assert markers.found() == []
    env = envs.path(key)
    manifest = json.loads((env / MANIFEST).read_text())
    assert manifest["resolved"] == {
        "python": {"evilpkg": "1.0.0", "tinypkg": "1.0.0"},
        "node": {"evilnode": "1.0.0", "tinynode": "1.0.0"},
    }
    assert (env / "python" / "evilpkg.pth").is_file()  # data: a run's PYTHONPATH entry is no site dir
    assert not (env / "python" / "bin").exists()
    assert not (env / "node" / "node_modules" / "evilnode" / "build").exists()  # no gyp build either
    assert os.listdir(open_tmp / "envs") == [key]  # no build or check folder left
    for path in [env, *env.rglob("*")]:
        st = path.lstat()
        assert (st.st_uid, st.st_gid) == (os.geteuid(), os.getegid()), path
        if stat.S_ISDIR(st.st_mode):
            assert stat.S_IMODE(st.st_mode) == 0o755, path
        elif stat.S_ISREG(st.st_mode):
            assert stat.S_IMODE(st.st_mode) in (0o644, 0o755), path
    # How pip ran: isolated, from a fresh empty folder, with the allow-listed environment.
    calls = [c for c in log.read_text().split("--\n") if c.strip()]
    pip_calls = [c for c in calls if "-m pip" in c]
    assert len(pip_calls) == 2, calls  # the dry run and the install
    for call in calls:
        lines = call.splitlines()
        fields = dict(line.split("=", 1) for line in lines if not line.startswith("env:"))
        variables = dict(line[4:].split("=", 1) for line in lines if line.startswith("env:"))
        assert fields["uid"] == str(user.uid if user else os.geteuid())
        assert fields["pwd"].endswith("/.tool/cwd") and fields["cwd_entries"] == "", call
        assert not fields["pwd"].startswith(str(checkout))
        assert set(variables) <= {*PASSED, "PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "PWD", "PIP_CONFIG_FILE"}
        assert fields["argv"].startswith("-I ")
    for call in pip_calls:
        assert "-m pip --isolated install" in call and "env:PIP_CONFIG_FILE=/dev/null" in call


# -- credentials of a private index ------------------------------------------------------------------

USER, PASSWORD, TOKEN = "indexuser", "s3cret-pass", "t0ken-value"
SECRETS = (PASSWORD, TOKEN, "npm-pass", "t0ken-npm")


class Index(http.server.BaseHTTPRequestHandler):
    """A PEP 503 index of one wheelhouse that wants basic auth; ``seen`` records what came."""

    wheels: Path
    seen: list[tuple[str, str | None]]

    def do_GET(self) -> None:  # noqa: N802 -- the http.server API
        self.seen.append((self.path, self.headers.get("Authorization")))
        expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if self.headers.get("Authorization") != expected:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="index"')
            self.end_headers()
            return
        parts = self.path.split("?")[0].strip("/").split("/")
        if parts[0] == "simple" and len(parts) == 2:
            links = "".join(
                f'<a href="/files/{w.name}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">{w.name}</a>'
                for w in self.wheels.glob("*.whl")
                if w.name.split("-")[0].replace("_", "-") == parts[1]
            )
            body, kind = f"<html><body>{links}</body></html>".encode(), "text/html"
        elif parts[0] == "files" and len(parts) == 2 and (self.wheels / parts[1]).is_file():
            body, kind = (self.wheels / parts[1]).read_bytes(), "application/octet-stream"
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def private_index(tmp_path: Path) -> Iterator[tuple[str, list[tuple[str, str | None]]]]:
    wheels = wheelhouse_in(tmp_path)
    seen: list[tuple[str, str | None]] = []
    handler = type("Handler", (Index,), {"wheels": wheels, "seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} leaked"


def test_a_private_index_resolves_and_the_manifest_names_it_without_credentials(
    tmp_path: Path,
    docker_runtime_name: str,
    private_index: tuple[str, list[tuple[str, str | None]]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    address, seen = private_index
    caplog.set_level(logging.DEBUG)
    dep_skill(tmp_path / "extra-skills", "private-deps", requirements="tinypkg\n")
    settings = make_settings(
        tmp_path,
        docker_runtime_name,
        **AS_SERVICE,
        package_index_url=f"http://{USER}:{PASSWORD}@{address}/simple/",
        npm_registry="https://npmuser:npm-pass@npm.example/?token=t0ken-npm",
    )
    executor = Executor.from_settings(settings)
    try:
        result = run(
            executor,
            skill="private-deps",
            command="python3 -c 'import tinypkg; print(tinypkg.VALUE)'; cat /opt/skill-envs/*/manifest.json",
        )
    finally:
        executor.close()
    assert result.exit_code == 0, result.stderr
    first, _, manifest_text = result.stdout.partition("\n")
    assert first == "42"  # resolved through the private index, in the sandbox
    assert_no_secret(result.stdout)
    assert USER not in result.stdout
    manifest = json.loads(manifest_text)
    assert manifest["package_sources"]["index_url"] == f"http://{address}/***"
    assert manifest["package_sources"]["npm_registry"] == "https://npm.example/***"
    assert any(path.startswith("/files/tinypkg") and auth for path, auth in seen)  # pip authenticated
    assert_no_secret("\n".join(r.getMessage() for r in caplog.records))


PATH_TOKEN = "pathT0ken-9c1e5b7a"


class TokenIndex(Index):
    """A PEP 503 index whose credential is a path segment (``/<token>/simple/``), as many
    hosted indexes give them: no basic auth, a wrong token is 404."""

    def do_GET(self) -> None:  # noqa: N802 -- the http.server API
        self.seen.append((self.path, None))
        parts = self.path.split("?")[0].strip("/").split("/")
        if parts[0] != PATH_TOKEN:
            self.send_response(404)
            self.end_headers()
            return
        parts = parts[1:]
        if parts[0] == "simple" and len(parts) == 2:
            links = "".join(
                f'<a href="/{PATH_TOKEN}/files/{w.name}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">'
                f"{w.name}</a>"
                for w in self.wheels.glob("*.whl")
                if w.name.split("-")[0].replace("_", "-") == parts[1]
            )
            body, kind = f"<html><body>{links}</body></html>".encode(), "text/html"
        elif parts[0] == "files" and len(parts) == 2 and (self.wheels / parts[1]).is_file():
            body, kind = (self.wheels / parts[1]).read_bytes(), "application/octet-stream"
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_token_in_the_index_path_never_reaches_a_run_nor_the_logs(
    tmp_path: Path, docker_runtime_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 39, 6b: an index whose token is a path segment (``https://host/<token>/simple/``)
    and an npm registry whose token is the query: a run of a skill with an environment reads
    the environment's manifest and finds scheme and host only, and so do the logs."""
    wheels = wheelhouse_in(tmp_path)
    seen: list[tuple[str, str | None]] = []
    handler = type("Handler", (TokenIndex,), {"wheels": wheels, "seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = f"127.0.0.1:{server.server_address[1]}"
    caplog.set_level(logging.DEBUG)
    dep_skill(tmp_path / "extra-skills", "path-token-deps", requirements="tinypkg\n")
    settings = make_settings(
        tmp_path,
        docker_runtime_name,
        **AS_SERVICE,
        package_index_url=f"http://{address}/{PATH_TOKEN}/simple/",
        npm_registry=f"https://npm.example/{PATH_TOKEN}-npm/?token={PATH_TOKEN}-q",
    )
    assert PATH_TOKEN not in repr(settings)
    executor = Executor.from_settings(settings)
    try:
        result = run(
            executor,
            skill="path-token-deps",
            # Every place the service puts into the sandbox (each mount but the image's read-only
            # root, which was built before the token existed) and the environment: the whole
            # image is 4 GB, whose grep outlasts the run's timeout on a busy machine.
            command="python3 -c 'import tinypkg; print(tinypkg.VALUE)'; cat /opt/skill-envs/*/manifest.json; "
            "for m in $(awk '$5 != \"/\" {print $5}' /proc/self/mountinfo | grep -Ev '^/(proc|sys|dev)(/|$)'); "
            'do grep -rl pathT0ken "$m" 2>/dev/null; done; env | grep pathT0ken; true',
        )
    finally:
        executor.close()
        server.shutdown()
        server.server_close()
    assert result.exit_code == 0, result.stderr
    first, _, rest = result.stdout.partition("\n")
    assert first == "42"  # resolved through the token's index, in the sandbox
    assert any(path.startswith(f"/{PATH_TOKEN}/files/tinypkg") for path, _ in seen)  # pip used the token
    assert PATH_TOKEN not in result.stdout + result.stderr  # not in the manifest, nowhere a run can read
    manifest = json.loads(rest[: rest.rindex("}") + 1])
    assert manifest["package_sources"]["index_url"] == f"http://{address}/***"
    assert manifest["package_sources"]["npm_registry"] == "https://npm.example/***"
    assert PATH_TOKEN not in "\n".join(r.getMessage() for r in caplog.records)


class NpmNotFound(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error": "Not found"}')

    def log_message(self, *args: object) -> None:
        pass


def test_refusals_quote_pip_and_npm_without_credentials(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """pip's and npm's own lines in a 422's ``details.log`` (and the log) name the index
    and the registry, without their credentials and tokens."""
    from skill_executor.api.app import create_app

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient
    npm = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NpmNotFound)
    threading.Thread(target=npm.serve_forever, daemon=True).start()
    caplog.set_level(logging.DEBUG)
    # Nothing listens on port 9 (discard): pip retries, quoting the index's path and query.
    settings = Settings(
        runtime="local",
        skills_dirs=[tmp_path / "skills"],
        data_dir=tmp_path / "data",
        skills_refresh_seconds=0.0,
        **AS_SERVICE,  # type: ignore[arg-type]
        package_index_url=f"http://{USER}:{PASSWORD}@127.0.0.1:9/simple/?token={TOKEN}",
        npm_registry=f"http://npmuser:npm-pass@127.0.0.1:{npm.server_address[1]}/?token=t0ken-npm",
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            client = TestClient(create_app(settings), base_url="http://127.0.0.1", client=("127.0.0.1", 50000))
        with client:
            answers = [
                client.post(
                    "/v1/skills",
                    content=skill_zip("py-unmet", "nosuchpkg\n"),
                    headers={"content-type": "application/zip"},
                )
            ]
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w") as archive:
                archive.writestr("node-unmet/SKILL.md", "---\nname: node-unmet\ndescription: d\n---\n# x\n")
                archive.writestr("node-unmet/package.json", json.dumps({"dependencies": {"nosuchnode": "^1.0.0"}}))
            answers.append(
                client.post("/v1/skills", content=buf.getvalue(), headers={"content-type": "application/zip"})
            )
    finally:
        npm.shutdown()
        npm.server_close()
    for answer, tool_line in zip(answers, ("Retrying", "404"), strict=True):
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert error["code"] == "skill_dependencies_unmet"
        assert any(tool_line in line for line in error["details"]["log"]), error  # the tool's own lines ...
        assert_no_secret(answer.text)  # ... without the secrets
        assert USER not in answer.text and "npmuser" not in answer.text
    assert_no_secret("\n".join(r.getMessage() for r in caplog.records))


def test_a_refusal_quotes_an_index_whose_token_is_in_its_path_without_the_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """pip quotes the index's path alone when it retries (``.../<token>/simple/pkg/``): the
    422's ``details.log`` and the log keep its own words, never the token."""
    from skill_executor.api.app import create_app

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient
    caplog.set_level(logging.DEBUG)
    settings = Settings(
        runtime="local",
        skills_dirs=[tmp_path / "skills"],
        data_dir=tmp_path / "data",
        skills_refresh_seconds=0.0,
        **AS_SERVICE,  # type: ignore[arg-type]
        package_index_url=f"http://127.0.0.1:9/{PATH_TOKEN}/simple/",  # nothing listens on port 9
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = TestClient(create_app(settings), base_url="http://127.0.0.1", client=("127.0.0.1", 50000))
    with client:
        answer = client.post(
            "/v1/skills", content=skill_zip("py-unmet", "nosuchpkg\n"), headers={"content-type": "application/zip"}
        )
        health = client.get("/healthz").text
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "skill_dependencies_unmet"
    assert any("Retrying" in line for line in error["details"]["log"]), error  # pip's own words ...
    assert PATH_TOKEN not in answer.text and PATH_TOKEN not in health  # ... without the token
    assert PATH_TOKEN not in "\n".join(r.getMessage() for r in caplog.records)


def _local_project(folder: Path, markers: Markers) -> Path:
    """A folder pip would build as a local project: its in-tree backend creates a marker."""
    project = folder / "project"
    project.mkdir(mode=0o755)
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
        '[project]\nname = "foo"\nversion = "1.0"\n'
    )
    hook = markers.python("local-project-built")
    (project / "backend.py").write_text(
        f"{hook}\n"
        "def get_requires_for_build_wheel(config_settings=None):\n    return []\n"
        "def prepare_metadata_for_build_wheel(d, config_settings=None):\n    raise SystemExit(1)\n"
        "def build_wheel(d, config_settings=None, metadata_directory=None):\n    raise SystemExit(1)\n"
    )
    for path in (project / "pyproject.toml", project / "backend.py"):
        path.chmod(0o644)
    return project


def test_a_need_pip_could_read_as_a_path_is_refused_and_builds_nothing(open_tmp: Path, markers: Markers) -> None:
    """``foo===/../../<dir>``: arbitrary equality takes any text, and pip read the slashes as
    a local project and ran its build backend on the host. In every source of needs, such a
    need is a finding; nothing is built, nothing runs."""
    project = _local_project(open_tmp, markers)
    traversal = "foo===" + "/.." * 20 + str(project)
    wheels = wheelhouse_in(open_tmp)
    envs = SkillEnvs(open_tmp / "envs", sources=Sources(wheelhouse=wheels), image=IMAGE, user=None)
    skill = dep_skill(open_tmp / "skills", "path-needs", requirements=f"tinypkg\n{traversal}\n")
    (skill / "pyproject.toml").write_text(f'[project]\nname = "x"\ndependencies = ["{traversal}"]\n')
    (skill / "tool.py").write_text(f'# /// script\n# dependencies = ["{traversal}", "foo===x"]\n# ///\n')
    needs = declared(skill)
    assert needs.python == ("tinypkg",)
    assert len(needs.findings) == 4 and all("===" in f.message for f in needs.findings), needs.findings
    with pytest.raises(ExecutorError) as info:
        envs.for_run(skill)
    assert info.value.code == "skill_dependencies_unmet"
    assert markers.found() == []
    # Defence in depth: a need that reached resolution some other way is refused there too.
    for need in (traversal, "foo==1.0/../x", "./foo", "foo.whl", "foo @ file:///tmp/x"):
        assert not safe_python_need(need), need


@pytest.mark.parametrize(
    "spec",
    [
        "HTTP:127.0.0.1:{port}",
        "Http://127.0.0.1:{port}/x.tgz",
        "FILE:..",
        "NPM:lodash@1",
        "evil.tgz",
        "GIT+ssh://127.0.0.1:{port}/x",
        "github:a/b",
        "LINK:..",
        "~/x",
        "../x",
        "a\\b",
    ],
)
def test_npm_specs_that_are_not_registry_ranges_are_refused_in_any_case(open_tmp: Path, spec: str) -> None:
    """npm reads schemes in any case: ``HTTP:`` made the host's npm fetch a URL of the
    skill's choice. Only registry versions, ranges and tags pass; nothing is fetched."""
    seen: list[str] = []

    class Listener(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            seen.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Listener)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        text = spec.format(port=server.server_address[1])
        needs, findings = parse_package_json(json.dumps({"dependencies": {"leftpad-zz": text}}), "package.json")
        assert needs == [] and len(findings) == 1
        envs = SkillEnvs(open_tmp / "envs", sources=Sources(), image=IMAGE, user=None)
        skill = dep_skill(open_tmp / "skills", "npm-spec", package={"leftpad-zz": text})
        with pytest.raises(ExecutorError) as info:
            envs.for_run(skill)
        assert info.value.code == "skill_dependencies_unmet"
        assert not safe_npm_spec(text)
    finally:
        server.shutdown()
        server.server_close()
    assert seen == []


def test_the_tool_user_cannot_read_what_the_service_stores(open_tmp: Path) -> None:
    """pip and npm run as the tool user with the network: the records, artifacts, registry,
    contexts and workspaces of the data dir are not theirs to read; the environments' root
    stays reachable for them."""
    if not AS_ROOT:
        pytest.skip("the tool user is the service's own user when the service is not root")
    settings = make_settings(open_tmp, "local")
    executor = Executor.from_settings(settings)
    try:
        executor.artifacts.put("secret.txt", b"tenant data")
        stored = [p for p in settings.data_dir.rglob("*") if p.is_file() and settings.envs_dir not in p.parents]
        assert any(p.name == "skill-executor.db" for p in stored) and any(p.suffix == ".db" for p in stored)
        probe = (
            "import os, sys\nfor p in sys.argv[1:]:\n"
            "    try:\n        open(p, 'rb').read(1); print('READ', p)\n"
            "    except OSError:\n        pass\n"
            "    try:\n        os.listdir(p); print('LISTED', p)\n    except OSError:\n        pass\n"
        )
        targets = [str(p) for p in stored] + [str(settings.data_dir), str(settings.artifacts_dir)]
        done = subprocess.run(
            ["/bin/sh", "-c", 'exec "$0" -I -S -c "$1" "$@"', "/usr/bin/python3", probe, *targets],
            user=TOOL_USER,
            group="nogroup",
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
        )
        assert done.stdout == "", done.stdout
        reach = subprocess.run(
            ["/bin/sh", "-c", f"cd {settings.data_dir} && echo reachable"],
            user=TOOL_USER,
            group="nogroup",
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert reach.stdout == "reachable\n", reach.stderr  # traversable: envs/ is built there
    finally:
        executor.close()
