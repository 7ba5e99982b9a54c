"""The published skills' invocation shapes, run through the real service on the default image.

The fixture skills in ``tests/fixtures/world/`` are our own code (published skills are never
vendored: their licences forbid it); each exercises the tools and the invocation shapes of one
published skill family as its SKILL.md tells an agent to run them -- ``python scripts/x.py`` from
the skill root, ``python -m scripts.x``, a heredoc importing the skill's own package, ``node``
with ``require('docx')``/``require('pptxgenjs')``, ``soffice --headless``, ``pdftoppm``, pandoc,
markitdown, tesseract, a local web server, relative writes (``unpacked/``), ``{baseDir}`` and the
hosted paths ``/mnt/skills/public/<name>``, ``/mnt/user-data/outputs`` -- with only file
locations chosen here. Every test runs on a service with a warm pool and on one without (pool 0).
The by-hand pass table over the published skills themselves is in docs/reference/examples.md.
"""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..api_server import Server
from ..conftest import require_runtime

pytestmark = pytest.mark.docker

WORLD = Path(__file__).resolve().parent.parent / "fixtures" / "world"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"


@pytest.fixture(scope="module", params=["warm-pool", "pool-0"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    require_runtime("docker")
    base = tmp_path_factory.mktemp(f"world-{request.param}")
    shutil.copytree(WORLD, base / "skills")
    pool = "2" if request.param == "warm-pool" else "0"
    srv = Server(
        base,
        env={"SKILL_EXECUTOR_RUNTIME": "docker", "SKILL_EXECUTOR_POOL_SIZE": pool, "SKILL_EXECUTOR_MAX_TIMEOUT": "300"},
    )
    srv.start()
    yield srv
    srv.stop()


class Ran:
    def __init__(self, result: dict[str, Any]) -> None:
        self.result = result
        self.stdout: str = result["stdout"]
        self.files = {item["name"]: item for item in result["output_files"]}

    def data(self, name: str) -> bytes:
        item = self.files[name]
        assert not item["truncated"], f"{name} truncated"
        content = item["content"]
        return base64.b64decode(content) if item["encoding"] == "base64" else content.encode()

    def mime(self, name: str) -> str:
        assert name in self.files, f"{name} not among {sorted(self.files)}"
        return str(self.files[name]["mime_type"])


def run(
    srv: Server,
    skill: str,
    command: str,
    *,
    globs: tuple[str, ...] = ("out/**",),
    cwd: str | None = None,
    expect: int = 0,
    timeout: float = 180,
) -> Ran:
    body: dict[str, Any] = {
        "skill": skill,
        "command": command,
        "timeout": timeout,
        "outputs": {"globs": list(globs), "inline_binary": True},
    }
    if cwd is not None:
        body["cwd"] = cwd
    response = httpx.post(f"{srv.url}/v1/runs", json=body, timeout=timeout + 60)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["exit_code"] == expect, (
        f"exit {result['exit_code']} (expected {expect})\nstdout: {result['stdout'][-3000:]}\n"
        f"stderr: {result['stderr'][-3000:]}"
    )
    return Ran(result)


def body_of(srv: Server, skill: str) -> str:
    response = httpx.get(f"{srv.url}/v1/skills/{skill}", timeout=30)
    assert response.status_code == 200, response.text
    return str(response.json()["body"])


def backticked(body: str, start: str) -> str:
    """The first inline-code command of the body starting with ``start``."""
    found = re.search(r"`(" + re.escape(start) + r"[^`]*)`", body)
    assert found, f"no `{start}...` in the body"
    return found.group(1)


def test_pdf_fill_fields_images_text_and_ocr(server: Server) -> None:
    body = body_of(server, "pdf-forms")
    make = backticked(body, "python /workspace/skills/pdf-forms/scripts/make_form.py")  # {baseDir} replaced
    assert make.endswith(" form.pdf") and "{baseDir}" not in body
    commands = " && ".join(
        [
            make.replace(" form.pdf", " work/form.pdf"),
            'echo \'{"customer": "Ada Lovelace"}\' > work/fields.json',
            "python scripts/fill_fields.py work/form.pdf work/fields.json out/filled.pdf",
            "python scripts/extract_text.py work/form.pdf",
            "python scripts/to_images.py out/filled.pdf out/pages/",
            "python scripts/render_text.py MATRIX out/word.png",
            "python scripts/ocr.py out/word.png",
        ]
    )
    ran = run(server, "pdf-forms", commands)
    assert ran.mime("out/filled.pdf") == "application/pdf"
    assert b"Ada Lovelace" in ran.data("out/filled.pdf")  # the field's /V
    assert ran.mime("out/pages/page_1.png") == "image/png"
    assert ran.data("out/pages/page_1.png").startswith(b"\x89PNG")
    assert "Invoice 4711" in ran.stdout  # pdfplumber
    assert "MATRIX" in ran.stdout.splitlines()[-1]  # tesseract read the rendered word
    # A field the form does not have: a non-zero exit with the reason, no output.
    bad = run(
        server,
        "pdf-forms",
        "python scripts/make_form.py work/form.pdf && echo '{\"nope\": 1}' > work/f.json"
        " && python scripts/fill_fields.py work/form.pdf work/f.json out/bad.pdf",
        expect=1,
    )
    assert "no such field(s): nope" in bad.result["stderr"] and "out/bad.pdf" not in bad.files


def _sheet_values(xlsx: bytes) -> dict[str, str]:
    """Cached values by 'sheetN!A1', read from the package's XML (no openpyxl on the host)."""
    values = {}
    with zipfile.ZipFile(io.BytesIO(xlsx)) as package:
        for name in package.namelist():
            found = re.fullmatch(r"xl/worksheets/(sheet\d+)\.xml", name)
            if found:
                xml = package.read(name).decode()
                for ref, value in re.findall(r'<c r="([A-Z]+\d+)"[^>]*>(?:<f[^>]*>[^<]*</f>)?<v>([^<]*)</v>', xml):
                    values[f"{found.group(1)}!{ref}"] = value
    return values


def test_xlsx_recalc_through_libreoffice(server: Server) -> None:
    ran = run(
        server,
        "sheet-recalc",
        "python scripts/make_book.py out/model.xlsx && python scripts/recalc.py out/model.xlsx 90"
        ' && { python scripts/recalc.py work/none.xlsx; echo "missing=$?"; }',
    )
    report, end = json.JSONDecoder().raw_decode(ran.stdout, ran.stdout.index("{"))
    assert '{"error": "file not found: work/none.xlsx"}' in ran.stdout[end:]
    assert report["status"] == "errors_found" and report["total_formulas"] == 4
    assert report["error_summary"] == {"#DIV/0!": {"count": 1, "locations": ["Model!C1"]}}
    assert ran.stdout.rstrip().endswith("missing=1")  # a file it cannot recalculate: non-zero
    assert ran.mime("out/model.xlsx") == XLSX
    values = _sheet_values(ran.data("out/model.xlsx"))
    assert values["sheet1!A3"] == "42" and values["sheet1!B1"] == "420" and values["sheet2!A1"] == "421"


def test_docx_js_unpack_edit_pack_pandoc_and_pdf(server: Server) -> None:
    commands = " && ".join(
        [
            'node scripts/make_doc.js out/new.docx "Quarterly report"',
            "python scripts/office/unpack.py out/new.docx unpacked/",  # relative to the skill root
            'python scripts/append_paragraph.py unpacked/ "Added by the matrix"',
            "python scripts/office/pack.py unpacked/ out/edited.docx",
            "pandoc --track-changes=all out/edited.docx -o out/edited.md",
            "soffice --headless --convert-to pdf --outdir out out/edited.docx",
        ]
    )
    ran = run(server, "docx-kit", commands)
    assert ran.mime("out/new.docx") == DOCX and ran.mime("out/edited.docx") == DOCX
    markdown = ran.data("out/edited.md").decode()
    assert "Quarterly report" in markdown and "Added by the matrix" in markdown
    assert ran.mime("out/edited.pdf") == "application/pdf" and ran.data("out/edited.pdf").startswith(b"%PDF")
    assert not (server.skills_dir / "docx-kit" / "unpacked").exists()  # the installed skill is untouched


def test_pptx_pptxgenjs_python_pptx_markitdown_thumbnails(server: Server) -> None:
    commands = " && ".join(
        [
            'node scripts/make_deck.js out/deck.pptx "Matrix deck"',
            'python scripts/add_slide.py out/deck.pptx "Second slide" out/deck2.pptx',
            "python -m markitdown out/deck2.pptx",
            "python scripts/thumbnail.py out/deck2.pptx /mnt/user-data/outputs/thumbs --cols 2",
        ]
    )
    ran = run(server, "pptx-kit", "cd /mnt/skills/public/pptx-kit && " + commands)
    assert ran.mime("out/deck.pptx") == PPTX and ran.mime("out/deck2.pptx") == PPTX
    assert "Matrix deck" in ran.stdout and "Second slide" in ran.stdout  # markitdown
    assert "with 2 slides" in ran.stdout
    assert ran.mime("out/thumbs.png") == "image/png"


def test_skill_validate_and_package(server: Server) -> None:
    ran = run(server, "skill-pack", "python scripts/quick_validate.py . && python -m scripts.package_skill . out/")
    assert ran.stdout.startswith("Skill is valid!")
    assert ran.mime("out/skill-pack.skill") == "application/zip"
    with zipfile.ZipFile(io.BytesIO(ran.data("out/skill-pack.skill"))) as archive:
        # The skill as installed: the run's out/work/inputs links are not part of it.
        assert sorted(archive.namelist()) == [
            "skill-pack/SKILL.md",
            "skill-pack/scripts/__init__.py",
            "skill-pack/scripts/package_skill.py",
            "skill-pack/scripts/quick_validate.py",
        ]
    bad = run(
        server,
        "skill-pack",
        "mkdir -p work/bad && printf -- '---\\nname: Bad_Name\\ndescription: x\\n---\\n' > work/bad/SKILL.md"
        " && python scripts/quick_validate.py work/bad",
        expect=1,
    )
    assert "bad name: 'Bad_Name'" in bad.stdout


def test_gif_builder_snippet_from_the_body(server: Server) -> None:
    body = body_of(server, "gif-maker")
    snippet = body.split("```python\n", 1)[1].split("```", 1)[0]
    ran = run(
        server,
        "gif-maker",
        f"python - <<'EOF'\n{snippet}EOF\n"
        "python -c 'from PIL import Image; print(Image.open(\"out/ball.gif\").n_frames)'",
    )
    assert ran.mime("out/ball.gif") == "image/gif"
    assert ran.data("out/ball.gif").startswith(b"GIF89a")
    assert ran.stdout.split()[-1] == "12"


def test_local_web_server_for_a_check(server: Server) -> None:
    line = next(
        line.strip()
        for line in body_of(server, "web-check").splitlines()
        if line.strip().startswith("python /workspace/skills/web-check/scripts/with_server.py")
    )
    line = line.replace("--directory site", "--directory work/site").replace("python check.py", "python work/check.py")
    setup = (
        "mkdir -p work/site && echo '<h1>Hello matrix</h1>' > work/site/index.html && printf '%s\\n' "
        "'import urllib.request' 'print(urllib.request.urlopen(\"http://localhost:5173/\").read().decode())'"
        " > work/check.py && python scripts/with_server.py --help >/dev/null && "
    )
    ran = run(server, "web-check", setup + line, timeout=60)
    assert "<h1>Hello matrix</h1>" in ran.stdout
    assert "server ready on port 5173" in ran.result["stderr"]


# -- Puppeteer: a skill's own, from its scripts/package.json, on the image's Chromium ---------

PUPPETEER = Path(__file__).resolve().parent.parent / "fixtures" / "puppeteer"


def bundled_tarball(modules: Path, name: str, into: Path) -> Path:
    """``name`` from an installed ``node_modules`` as an ``npm pack`` tarball with everything it
    needs bundled (``bundleDependencies``): ``npm install --offline`` installs it from the file
    alone, as from a registry."""
    needed: list[Path] = []
    todo = [modules / name]
    while todo:
        folder = todo.pop()
        meta = json.loads((folder / "package.json").read_text())
        for dep in {**meta.get("dependencies", {}), **meta.get("optionalDependencies", {})}:
            at = folder  # node's lookup: the package's own node_modules, then each folder above
            while not (at / "node_modules" / dep).is_dir() and at != modules.parent:
                at = at.parent
            found = at / "node_modules" / dep
            if found.is_dir() and found not in needed:
                needed.append(found)
                todo.append(found)
    package = into / "build" / "package"
    shutil.copytree(modules / name, package)
    for found in needed:  # hoisted ones at the top; nested ones come with their parent's copy
        if "node_modules" not in found.relative_to(modules).parts:  # (scoped ones: @scope/name)
            shutil.copytree(found, package / "node_modules" / found.relative_to(modules), dirs_exist_ok=True)
    meta = json.loads((package / "package.json").read_text())
    meta["bundleDependencies"] = sorted(meta.get("dependencies", {}))
    (package / "package.json").write_text(json.dumps(meta))
    tarball = into / f"{name}-{meta['version']}.tgz"
    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(package, arcname="package")
    shutil.rmtree(into / "build")
    return tarball


@pytest.fixture(scope="module")
def puppeteer_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A service whose npm source is a folder holding puppeteer (from the test tools, offline)."""
    require_runtime("docker")
    from .. import npmtools

    base = tmp_path_factory.mktemp("puppeteer")
    shutil.copytree(PUPPETEER, base / "skills")
    (base / "npm").mkdir()
    bundled_tarball(npmtools.install() / "node_modules", "puppeteer", base / "npm")
    srv = Server(
        base,
        env={
            "SKILL_EXECUTOR_RUNTIME": "docker",
            "SKILL_EXECUTOR_POOL_SIZE": "0",
            "SKILL_EXECUTOR_MAX_TIMEOUT": "300",
            "SKILL_EXECUTOR_NPM_WHEELHOUSE": str(base / "npm"),
            "SKILL_EXECUTOR_HOST_TOOLS_USER": "root",  # not about who runs npm (test_hosttools is)
        },
    )
    srv.start()
    yield srv
    srv.stop()


def test_puppeteer_renders_a_page_with_the_image_chromium(puppeteer_server: Server) -> None:
    """claudekit's chrome-devtools shape: ``puppeteer`` in scripts/package.json, imported as an
    ES module, launched with its defaults.  The skill's environment gets puppeteer without a
    browser (npm runs no install script, so its Chrome download never runs); in the run,
    PUPPETEER_EXECUTABLE_PATH points it at the image's Chromium (bin/chromium: the headless
    shell with --no-sandbox), which renders a file:// page to a PNG and a PDF, offline."""
    body = body_of(puppeteer_server, "page-shot")
    command = next(line for line in body.splitlines() if line.startswith("node scripts/shot.mjs"))
    command = command.replace("file:///path/to/page.html", "file://$WORK_DIR/page.html")
    setup = (
        "printf '<title>Shot</title><h1>Rendered offline</h1>' > \"$WORK_DIR/page.html\" && "
        'echo "exe=$PUPPETEER_EXECUTABLE_PATH" && '
    )
    ran = run(puppeteer_server, "page-shot", setup + command + " && ls $HOME/.cache/puppeteer 2>&1 | head -1")
    lines = ran.stdout.splitlines()
    assert lines[0] == "exe=/usr/local/bin/chromium"
    shot = json.loads(lines[1])
    assert shot["title"] == "Shot" and shot["browser"].startswith("HeadlessChrome/")
    assert "No such file or directory" in lines[2]  # nothing was downloaded into HOME either
    assert ran.mime("out/page.png") == "image/png" and ran.data("out/page.png").startswith(b"\x89PNG")
    assert ran.mime("out/page.pdf") == "application/pdf" and ran.data("out/page.pdf").startswith(b"%PDF")
    env = next((puppeteer_server.base / "data" / "envs").glob("*/node/node_modules/puppeteer"))
    assert not [p for p in env.parent.rglob("*") if p.name in ("chrome", "chrome-headless-shell")]  # no browser
