"""The runner image: what the published skills call is there and works in a run.

Container tests go through the service's own Docker runtime (read-only root, caps
dropped, no network, uid 1000, HOME and TMPDIR in the run's workspace), so every tool
is checked under the hardening it meets in production.  The pure checks of
``skill_executor.image.inputs`` (pins, tag inputs, version parsing) need no engine.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from skill_executor.core import Executor
from skill_executor.errors import ExecutorError
from skill_executor.image.inputs import (
    DEFAULT_TIER,
    IMAGE_PYTHON,
    PYTHON_TIERS,
    REPOSITORY,
    direct_packages,
    flavour_inputs,
    flavour_tier,
    images_dir,
    parse_versions,
    pin_sets,
    pip_download_command,
    read_pins,
    runner_aliases,
    runner_tag,
    tree_hash,
)
from skill_executor.image.build import build_image, runner_versions
from skill_executor.outputs.schema import OutputSpec
from skill_executor.runs.models import RunRequest, RunResult

from ..conftest import make_settings, require_runtime

RUNNER = images_dir() / "runner"

# Import name of each Python package the full flavour promises.
PYTHON_MODULES = {
    "numpy": "numpy",
    "pandas": "pandas",
    "scipy": "scipy",
    "scikit-learn": "sklearn",
    "statsmodels": "statsmodels.api",
    "matplotlib": "matplotlib.pyplot",
    "seaborn": "seaborn",
    "pyarrow": "pyarrow",
    "openpyxl": "openpyxl",
    "xlsxwriter": "xlsxwriter",
    "xlrd": "xlrd",
    "pillow": "PIL.Image",
    "python-pptx": "pptx",
    "python-docx": "docx",
    "pypdf": "pypdf",
    "pdfplumber": "pdfplumber",
    "pypdfium2": "pypdfium2",
    "pdf2image": "pdf2image",
    "reportlab": "reportlab",
    "img2pdf": "img2pdf",
    "sympy": "sympy",
    "tqdm": "tqdm",
    "defusedxml": "defusedxml",
    "lxml": "lxml.etree",
    "pytesseract": "pytesseract",
    "markitdown": "markitdown",
    "imageio": "imageio.v3",
    "pyyaml": "yaml",
    "beautifulsoup4": "bs4",
    "tabulate": "tabulate",
    "playwright": "playwright.sync_api",
    "anthropic": "anthropic",
    "mcp": "mcp",
    "pytest": "pytest",
    "uv": "uv",  # the real uv binary's package (bin/uv serves `uv run`: tests/engine/test_image_tools.py)
}
MINIMAL_MODULES = [
    "numpy",
    "pandas",
    "matplotlib.pyplot",
    "PIL.Image",
    "openpyxl",
    "pypdf",
    "reportlab",
    "docx",
    "yaml",
    "lxml.etree",
    "defusedxml",
]


# -- pure checks ----------------------------------------------------------------------


def test_every_promised_python_package_is_pinned_directly() -> None:
    direct, npm = direct_packages(RUNNER)
    assert sorted(direct) == sorted(PYTHON_MODULES)
    assert npm == ["docx", "pdf-lib", "pptxgenjs", "react", "react-dom", "react-icons", "sharp"]
    assert all("==" in pin for pin in read_pins(RUNNER / "requirements-full.txt"))


def test_minimal_pins_are_full_pins_and_the_rest_is_the_full_part() -> None:
    sets = pin_sets(RUNNER)
    full = read_pins(RUNNER / "requirements-full.txt")
    assert set(sets["minimal"]) <= set(full)
    assert sorted(sets["minimal"] + sets["full"]) == sorted(full)
    assert "pypdf==3.4.1" not in full  # Debian's pypdf is too old for the pdf skill's form scripts


def test_pins_that_disagree_are_refused(tmp_path: Path) -> None:
    (tmp_path / "requirements-minimal.txt").write_text("numpy==2.0.0\n")
    (tmp_path / "requirements-full.txt").write_text("# direct\nnumpy==2.4.6\nuv==0.13.9\n")
    (tmp_path / "requirements-tier.txt").write_text("uv==0.13.9\n")
    (tmp_path / "requirements-podserver.txt").write_text("")
    with pytest.raises(ExecutorError, match="numpy==2.0.0, which requirements-full.txt does not pin identically"):
        pin_sets(tmp_path)
    (tmp_path / "requirements-minimal.txt").write_text("numpy==2.4.6\n")
    (tmp_path / "requirements-tier.txt").write_text("uv==0.14.0\n")
    with pytest.raises(ExecutorError, match=r"requirements-tier.txt pins uv==0.14.0, which requirements-full.txt"):
        pin_sets(tmp_path)
    (tmp_path / "requirements-full.txt").write_text("numpy>=2\n")
    with pytest.raises(ExecutorError, match="not an exact pin"):
        read_pins(tmp_path / "requirements-full.txt")


def test_the_tag_covers_pins_not_downloads(tmp_path: Path) -> None:
    runner = tmp_path / "runner"
    shutil.copytree(RUNNER, runner, ignore=shutil.ignore_patterns("wheelhouse", "cache", "cache.*"))
    full = tree_hash(flavour_inputs(runner, "full"), tmp_path)
    minimal = tree_hash(flavour_inputs(runner, "minimal"), tmp_path)
    # What the host downloads changes no tag.
    (runner / "wheelhouse" / "full").mkdir(parents=True)
    (runner / "wheelhouse" / "full" / "x-1-py3-none-any.whl").write_bytes(b"new bytes")
    (runner / "wheelhouse" / "full.sha256").write_text("x\n")
    (runner / "npm" / "cache" / "_cacache").mkdir(parents=True)
    (runner / "npm" / "cache" / "_cacache" / "index").write_text("y")
    (runner / "npm" / "cache.sha256").write_text("y\n")
    assert tree_hash(flavour_inputs(runner, "full"), tmp_path) == full
    assert tree_hash(flavour_inputs(runner, "minimal"), tmp_path) == minimal
    # A full-only pin changes the full tag only; a minimal pin changes both.
    with (runner / "requirements-full.txt").open("a") as f:
        f.write("extra-package==1.0\n")
    assert tree_hash(flavour_inputs(runner, "full"), tmp_path) != full
    assert tree_hash(flavour_inputs(runner, "minimal"), tmp_path) == minimal
    (runner / "npm" / "package-lock.json").write_text("{}")
    assert tree_hash(flavour_inputs(runner, "minimal"), tmp_path) == minimal
    with (runner / "requirements-minimal.txt").open("a") as f:
        f.write("extra-package==1.0\n")
    assert tree_hash(flavour_inputs(runner, "minimal"), tmp_path) != minimal
    assert runner_tag("full", "a" * 64) == f"{REPOSITORY}:{'a' * 16}"
    assert runner_tag("minimal", "a" * 64) == f"{REPOSITORY}:minimal-{'a' * 16}"
    assert "latest" in runner_aliases("full") and "latest" not in runner_aliases("minimal")


def test_the_python_tier_tag_covers_its_own_pins(tmp_path: Path) -> None:
    runner = tmp_path / "runner"
    shutil.copytree(RUNNER, runner, ignore=shutil.ignore_patterns("wheelhouse", "cache", "cache.*"))
    full, tier = (tree_hash(flavour_inputs(runner, flavour), tmp_path) for flavour in ("full", "python3.13"))
    with (runner / "requirements-full.txt").open("a") as f:
        f.write("extra-package==1.0\n")
    assert tree_hash(flavour_inputs(runner, "python3.13"), tmp_path) == tier  # not the full flavour's pins
    with (runner / "requirements-tier.txt").open("a") as f:
        f.write("extra-package==1.0\n")
    assert tree_hash(flavour_inputs(runner, "python3.13"), tmp_path) != tier
    assert tree_hash(flavour_inputs(runner, "full"), tmp_path) != full
    full, tier = (tree_hash(flavour_inputs(runner, flavour), tmp_path) for flavour in ("full", "python3.13"))
    with (runner / "Dockerfile.tier").open("a") as f:  # the tier's own steps: its tag alone
        f.write("# changed\n")
    assert tree_hash(flavour_inputs(runner, "python3.13"), tmp_path) != tier
    assert tree_hash(flavour_inputs(runner, "full"), tmp_path) == full
    assert runner_tag("python3.13", "b" * 64) == f"{REPOSITORY}:python3.13-{'b' * 16}"
    assert runner_aliases("python3.13") == ("python3.13",)


def test_the_python_tiers_are_the_settings_tiers() -> None:
    from skill_executor.config import PYTHON_TIER_NAMES

    assert list(PYTHON_TIERS) == [DEFAULT_TIER.name, *PYTHON_TIER_NAMES]
    assert [tier.flavour for tier in PYTHON_TIERS.values()] == ["full", "python3.13"]
    assert flavour_tier("minimal") == DEFAULT_TIER and flavour_tier("python3.13").python == "3.13.5"
    assert "uv==0.13.9" in pin_sets(RUNNER)["tier"]  # `uv run` on every tier


def test_wheels_of_the_python_tier_are_fetched_for_its_python() -> None:
    tier = PYTHON_TIERS["3.13"]
    command = pip_download_command("python3", Path("r.txt"), Path("w"), tier)
    assert command[command.index("--python-version") + 1] == "3.13.5"  # Debian trixie's python3
    assert command[command.index("--abi") + 1] == "cp313"
    assert "manylinux_2_41_x86_64" in command and not any("manylinux_2_42" in part for part in command)


def test_wheels_are_fetched_for_the_image_python_not_the_host() -> None:
    command = pip_download_command("python3", Path("r.txt"), Path("w"))
    assert IMAGE_PYTHON == "3.11.2"  # Debian bookworm's python3: Requires-Python is checked against it
    assert command[command.index("--python-version") + 1] == "3.11.2"
    assert "--only-binary=:all:" in command and "--no-deps" in command
    assert "manylinux_2_36_x86_64" in command and "manylinux2014_x86_64" in command
    assert not any("manylinux_2_37" in part for part in command)


def test_version_output_is_parsed() -> None:
    output = "\n".join(
        [
            "@@LibreOffice",
            "LibreOffice 25.2.3.2 520(Build:2)",
            "@@Node.js",
            "v18.20.4",
            "@@jq",
            "jq-1.6",
            "@@ImageMagick",
            "Version: ImageMagick 6.9.11-60 Q16 x86_64 2021-01-25",
            "@@soffice-less",
            "@@python:numpy",
            "2.4.6",
            "@@7-Zip (p7zip)",
            "7-Zip [64] 16.02 : Copyright (c) 1999-2016 Igor Pavlov",
        ]
    )
    assert parse_versions(output) == {
        "LibreOffice": "25.2.3.2",
        "Node.js": "18.20.4",
        "jq": "1.6",
        "ImageMagick": "6.9.11-60",
        "soffice-less": "—",
        "python:numpy": "2.4.6",
        "7-Zip (p7zip)": "16.02",
    }


# -- in the image, through the service's runtime --------------------------------------


@pytest.fixture(scope="module")
def executor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Executor]:
    require_runtime("docker")
    made = Executor.from_settings(make_settings(tmp_path_factory.mktemp("image"), "docker", default_timeout=120.0))
    yield made
    made.close()


def run(executor: Executor, command: str, timeout: float = 120) -> RunResult:
    result = executor.runner.run(RunRequest(skill="math-tools", command=command, timeout=timeout))
    assert result.exit_code == 0, f"exit {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


def test_python_is_python3_and_every_package_imports(executor: Executor) -> None:
    modules = json.dumps(sorted(PYTHON_MODULES.values()))
    result = run(
        executor,
        f"""
python --version
readlink -f "$(command -v python)"
python - <<'EOF'
import importlib, importlib.metadata as m
for name in {modules}:
    importlib.import_module(name)
print("imported", len({modules}))
print("pypdf", m.version("pypdf"))
EOF
""",
    )
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Python 3.11.")
    assert lines[1] == "/usr/bin/python3.11"
    assert f"imported {len(PYTHON_MODULES)}" in lines
    pypdf = next(line for line in lines if line.startswith("pypdf "))
    assert int(pypdf.split()[1].split(".")[0]) >= 5  # not Debian's 3.4


def test_system_tools_are_there(executor: Executor) -> None:
    result = run(
        executor,
        """
set -e
cd "$WORK_DIR"
ffmpeg -hide_banner -version | head -n1
git --version
echo '{"a": [1, 2]}' | jq -c '.a'
sqlite3 :memory: 'select 6*7;'
printf 'needle\\n' > hay.txt && rg -c needle hay.txt
7z a -bd -bso0 packed.7z hay.txt && rm hay.txt && 7z x -bd -bso0 packed.7z && cat hay.txt
zip -q packed.zip hay.txt && unzip -p packed.zip hay.txt
qpdf --version | head -n1
pdftoppm -v 2>&1 | head -n1
""",
    )
    out = result.stdout
    assert out.startswith("ffmpeg version ")
    assert "git version " in out
    assert "[1,2]\n42\n1\nneedle\nneedle\n" in out
    assert "qpdf version " in out and "pdftoppm version " in out


def test_graphviz_curl_and_pip_as_skills_call_them(executor: Executor) -> None:
    result = run(
        executor,
        """
set -e
cd "$WORK_DIR"
echo 'digraph { a -> b }' | dot -Tsvg > g.svg && grep -c '<svg' g.svg
python3 -m http.server 8123 --bind 127.0.0.1 >/dev/null 2>&1 & server=$!
for i in $(seq 50); do curl -s -o /dev/null http://localhost:8123/ && break; sleep 0.1; done
curl -s http://localhost:8123/g.svg | grep -c '<svg'
kill $server
printf 'pypdf\\nopenpyxl>=3\\n' > req.txt
pip install -q -r req.txt && echo pip-satisfied
pip install -q no-such-package-xyz >/dev/null 2>&1 || echo pip-refused
""",
    )
    assert result.stdout.splitlines() == ["1", "1", "pip-satisfied", "pip-refused"], result.stderr


def test_node_renders_icons_and_edits_pdfs(executor: Executor) -> None:
    """What pptxgenjs.md's icon recipe (react-icons -> SVG -> sharp -> PNG) and the pdf
    skill's JavaScript (pdf-lib) need."""
    result = run(
        executor,
        """
cd "$WORK_DIR"
node - <<'EOF'
const fs = require("fs");
const React = require("react");
const ReactDOMServer = require("react-dom/server");
const { FaBeer } = require("react-icons/fa");
const sharp = require("sharp");
const { PDFDocument } = require("pdf-lib");
(async () => {
  const svg = ReactDOMServer.renderToStaticMarkup(React.createElement(FaBeer, { color: "#336699", size: "256" }));
  const png = await sharp(Buffer.from(svg)).png().toBuffer();
  fs.writeFileSync("icon.png", png);
  const pdf = await PDFDocument.create();
  pdf.addPage([200, 100]).drawText("pdf-lib");
  fs.writeFileSync("made.pdf", await pdf.save());
  console.log(svg.startsWith("<svg"), (await sharp(png).metadata()).width);
})();
EOF
python3 -c 'from pypdf import PdfReader; print(len(PdfReader("made.pdf").pages))'
""",
    )
    assert result.stdout.splitlines() == ["true 256", "1"], result.stderr


def test_node_requires_docx_and_pptxgenjs_from_anywhere(executor: Executor) -> None:
    result = run(
        executor,
        """
cd "$WORK_DIR"
node - <<'EOF'
const fs = require("fs");
const { Document, Packer, Paragraph } = require("docx");
const PptxGenJS = require("pptxgenjs");
const pptx = new PptxGenJS();
pptx.addSlide().addText("Slide from pptxgenjs", { x: 1, y: 1 });
(async () => {
  fs.writeFileSync("made.docx", await Packer.toBuffer(new Document({ sections: [{ children: [new Paragraph("Made by docx")] }] })));
  await pptx.writeFile({ fileName: "made.pptx" });
  console.log("node", process.version);
})();
EOF
python - <<'EOF'
from docx import Document
from pptx import Presentation
print(Document("made.docx").paragraphs[0].text)
print(Presentation("made.pptx").slides[0].shapes[0].text_frame.text)
EOF
""",
    )
    assert "Made by docx\nSlide from pptxgenjs\n" in result.stdout
    assert "node v22." in result.stdout  # Node.js 22 (LTS), not bookworm's 18


DOCX_TO_PDF = """
set -e
cd "$WORK_DIR"
python - <<'EOF'
from docx import Document
document = Document()
document.add_heading("Quarterly report", 1)
document.add_paragraph("Converted by LibreOffice in a read-only container.")
document.save("report.docx")
EOF
soffice --headless --convert-to pdf --outdir "$WORK_DIR" report.docx >/dev/null 2>&1
pdftotext report.pdf - | tr -s '\\n' ' '
echo
python -m markitdown report.docx
"""


def test_libreoffice_converts_a_docx_to_pdf_headless(executor: Executor) -> None:
    result = run(executor, DOCX_TO_PDF, timeout=180)
    assert "Quarterly report Converted by LibreOffice in a read-only container." in result.stdout
    assert "# Quarterly report" in result.stdout  # markitdown's Markdown of the docx


def test_libreoffice_converts_in_a_warm_pool_container(tmp_path: Path) -> None:
    """The same through the launcher in a pre-started container (the warm pool)."""
    require_runtime("docker")
    pooled = Executor.from_settings(make_settings(tmp_path, "docker-pool", pool_size=1))
    try:
        assert pooled.runtime.pool is not None and pooled.runtime.pool.wait_ready()  # type: ignore[attr-defined]
        result = run(pooled, DOCX_TO_PDF, timeout=180)
    finally:
        pooled.close()
    assert "Quarterly report Converted by LibreOffice in a read-only container." in result.stdout


def test_libreoffice_recalculates_xlsx_formulas_with_and_without_a_macro(executor: Executor) -> None:
    # The xlsx skill's recalc.py: a Basic macro in the user profile, run headless.
    result = run(
        executor,
        r"""
set -e
cd "$WORK_DIR"
python - <<'EOF'
from openpyxl import Workbook
wb = Workbook()
ws = wb.active
ws["A1"], ws["A2"], ws["A3"] = 20, 22, "=SUM(A1:A2)"
wb.save("plain.xlsx")
wb.save("macro.xlsx")
EOF
soffice --headless --convert-to xlsx --outdir converted plain.xlsx >/dev/null 2>&1
macros="$HOME/.config/libreoffice/4/user/basic/Standard"
soffice --headless --terminate_after_init >/dev/null 2>&1 || true
mkdir -p "$macros"
cat > "$macros/Module1.xba" <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE script:module PUBLIC "-//OpenOffice.org//DTD OfficeDocument 1.0//EN" "module.dtd">
<script:module xmlns:script="http://openoffice.org/2000/script" script:name="Module1" script:language="StarBasic">
    Sub RecalculateAndSave()
      ThisComponent.calculateAll()
      ThisComponent.store()
      ThisComponent.close(True)
    End Sub
</script:module>
EOF
timeout 60 soffice --headless --norestore \
  'vnd.sun.star.script:Standard.Module1.RecalculateAndSave?language=Basic&location=application' \
  "$WORK_DIR/macro.xlsx" >/dev/null 2>&1
python - <<'EOF'
from openpyxl import load_workbook
for path in ("converted/plain.xlsx", "macro.xlsx"):
    print(path, load_workbook(path, data_only=True).active["A3"].value)
EOF
""",
        timeout=240,
    )
    assert "converted/plain.xlsx 42\n" in result.stdout
    assert "macro.xlsx 42\n" in result.stdout


def test_pandoc_tesseract_and_imagemagick(executor: Executor) -> None:
    result = run(
        executor,
        """
set -e
cd "$WORK_DIR"
printf '# Title\\n\\nSome *emphasis*.\\n' > note.md
pandoc note.md -o note.docx
python -c 'from docx import Document; print([p.text for p in Document("note.docx").paragraphs])'
python - <<'EOF'
from PIL import Image, ImageDraw, ImageFont
image = Image.new("RGB", (900, 200), "white")
font = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 72)
ImageDraw.Draw(image).text((30, 50), "HELLO OCR 42", fill="black", font=font)
image.save("text.png")
EOF
tesseract text.png - 2>/dev/null
convert text.png -resize 50% small.jpg
identify -format '%m %wx%h\\n' small.jpg
python -c 'import pytesseract; from PIL import Image; print("pytesseract:", pytesseract.image_to_string(Image.open("text.png")).strip())'
""",
    )
    out = result.stdout
    assert "['Title', 'Some emphasis.']" in out
    assert "HELLO OCR 42" in out
    assert "JPEG 450x100" in out
    assert "pytesseract: HELLO OCR 42" in out


def test_pdf_libraries_on_a_reportlab_pdf(executor: Executor) -> None:
    result = run(
        executor,
        """
set -e
cd "$WORK_DIR"
python - <<'EOF'
from reportlab.lib.pagesizes import A4
from reportlab.pdfgen import canvas
pdf = canvas.Canvas("made.pdf", pagesize=A4)
pdf.drawString(100, 750, "Invoice number 12345")
pdf.showPage()
pdf.drawString(100, 750, "Second page")
pdf.save()

import pdfplumber, pypdfium2, img2pdf
from pdf2image import convert_from_path
from pypdf import PdfReader
with pdfplumber.open("made.pdf") as doc:
    print("pdfplumber:", doc.pages[0].extract_text())
print("pypdf pages:", len(PdfReader("made.pdf").pages))
pages = convert_from_path("made.pdf", dpi=50)
print("pdf2image:", len(pages), pages[0].size[1])
bitmap = pypdfium2.PdfDocument("made.pdf")[0].render(scale=0.5).to_pil()
print("pypdfium2:", bitmap.size)
pages[0].save("page.png")
open("again.pdf", "wb").write(img2pdf.convert("page.png"))
print("img2pdf pages:", len(PdfReader("again.pdf").pages))
EOF
qpdf --check made.pdf
""",
    )
    out = result.stdout
    assert "pdfplumber: Invoice number 12345" in out
    assert "pypdf pages: 2" in out
    assert "pdf2image: 2 585" in out  # A4 at 50 dpi
    assert "pypdfium2: (298, 421)" in out
    assert "img2pdf pages: 1" in out
    assert "No syntax or stream encoding errors found" in out


# A page served on localhost by a server the run starts itself, opened by Playwright the
# way the webapp-testing skill's examples do (sync API, `launch(headless=True)`), with a
# screenshot into out/: the image's Chromium works as uid 1000 on the read-only root,
# without network or capabilities, under the launcher's seccomp filter in the warm pool,
# and on gVisor.
WEBAPP_TEST = r"""
set -e
cd "$WORK_DIR"
mkdir site
printf '<html><head><title>Served page</title></head><body><h1>Hello</h1><button>Go</button></body></html>' \
  > site/index.html
python3 -m http.server 5173 --bind 127.0.0.1 --directory site >/dev/null 2>&1 &
server=$!
python3 -c '
import socket, time
for _ in range(100):
    try:
        socket.create_connection(("localhost", 5173), timeout=1).close()
        break
    except OSError:
        time.sleep(0.1)
'
python3 - <<'EOF'
from playwright.sync_api import sync_playwright
with sync_playwright() as p:
    browser = p.chromium.launch(headless=True)
    page = browser.new_page()
    page.goto("http://localhost:5173")
    page.wait_for_load_state("networkidle")
    page.screenshot(path="../out/page.png", full_page=True)
    print("title:", page.title(), "buttons:", page.locator("button").count())
    browser.close()
EOF
kill $server
"""


@pytest.mark.parametrize(
    ("runtime", "pool_size"), [("docker", 0), ("docker", 1), ("docker-runsc", 0)], ids=["pool0", "warm-pool", "gvisor"]
)
def test_playwright_screenshots_a_page_served_on_localhost(tmp_path: Path, runtime: str, pool_size: int) -> None:
    require_runtime(runtime)
    made = Executor.from_settings(make_settings(tmp_path, runtime, pool_size=pool_size, default_timeout=120.0))
    try:
        if pool_size:
            assert made.runtime.pool is not None and made.runtime.pool.wait_ready()  # type: ignore[attr-defined]
        result = made.runner.run(
            RunRequest(skill="math-tools", command=WEBAPP_TEST, timeout=120, outputs=OutputSpec(globs=["out/*"]))
        )
    finally:
        made.close()
    assert result.exit_code == 0, f"exit {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "title: Served page buttons: 1\n" in result.stdout
    shots = [f for f in result.output_files if f.name.endswith("page.png")]
    assert shots and shots[0].mime_type == "image/png" and shots[0].size_bytes > 1000, result.output_files


PLAYWRIGHT_LAUNCHES = r"""
set -e
before="$(ls -laR "$PLAYWRIGHT_BROWSERS_PATH" | md5sum)"
python3 - <<'EOF'
from playwright.sync_api import sync_playwright
with sync_playwright() as p:
    for options in ({}, {"headless": False}, {"channel": "chromium"}):
        browser = p.chromium.launch(**options)
        page = browser.new_page()
        page.set_content("<title>t</title><p>x</p>")
        print(options, browser.version.split(".")[0].isdigit(), page.title())
        browser.close()
EOF
test "$before" = "$(ls -laR "$PLAYWRIGHT_BROWSERS_PATH" | md5sum)" && echo unchanged
readlink -f "$PLAYWRIGHT_BROWSERS_PATH"/chromium_headless_shell-*/chrome-headless-shell-linux64/chrome-headless-shell
"""


def test_playwright_default_launch_finds_the_image_chromium_without_a_download(executor: Executor) -> None:
    """``p.chromium.launch()`` with no arguments (the headless shell), ``headless=False``
    and ``channel="chromium"`` all start the image's Chromium; nothing is downloaded or
    written under the browsers folder."""
    result = run(executor, PLAYWRIGHT_LAUNCHES)
    assert "{} True t\n{'headless': False} True t\n{'channel': 'chromium'} True t\n" in result.stdout
    assert "unchanged\n/usr/lib/chromium/chromium-headless-shell\n" in result.stdout
    assert "download" not in (result.stdout + result.stderr).lower()


def test_mcp_builder_imports_anthropic_and_the_mcp_clients(executor: Executor) -> None:
    """What the published mcp-builder skill's scripts/evaluation.py and connections.py
    import (mcp 1's ``streamablehttp_client``, which mcp 2 renamed)."""
    result = run(
        executor,
        """
python3 - <<'EOF'
import anthropic, mcp
print("imported")
from anthropic import Anthropic
from mcp import ClientSession, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client
print("clients", Anthropic.__name__, ClientSession.__name__, StdioServerParameters.__name__,
      sse_client.__name__, stdio_client.__name__, streamablehttp_client.__name__)
EOF
""",
    )
    assert result.stdout.startswith("imported\nclients Anthropic ClientSession StdioServerParameters sse_client ")


def test_versions_table_names_each_tool(executor: Executor) -> None:
    table = runner_versions(executor.runtime.client, [executor.settings.docker_image])  # type: ignore[attr-defined]
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1].rstrip(" |") for line in table.splitlines()[2:]}
    assert rows["`python`"].startswith("3.11.")
    assert rows["LibreOffice"].split(".")[0].isdigit() and int(rows["LibreOffice"].split(".")[0]) >= 24
    assert rows["Python `pypdf`"] == next(
        p.split("==")[1] for p in read_pins(RUNNER / "requirements-full.txt") if p.startswith("pypdf==")
    )
    assert rows["npm `docx`"] == json.loads((RUNNER / "npm" / "package.json").read_text())["dependencies"]["docx"]
    assert "—" not in table, table


def test_minimal_flavour_builds_on_its_own_tag(tmp_path: Path) -> None:
    """The minimal flavour is the full one's prefix, so after the full build it is cached."""
    require_runtime("docker")
    from skill_executor.runtimes.docker import connect

    client = connect(timeout=600)
    latest = client.images.get(f"{REPOSITORY}:latest").id
    result = build_image(client, flavour="minimal")
    assert result.tag.startswith(f"{REPOSITORY}:minimal-")
    assert client.images.get(f"{REPOSITORY}:latest").id == latest, "the minimal build moved :latest"
    assert client.images.get(f"{REPOSITORY}:minimal").id == client.images.get(result.tag).id
    executor = Executor.from_settings(make_settings(tmp_path, "docker", docker_image=result.tag))
    try:
        modules = json.dumps(MINIMAL_MODULES)
        result_run = run(
            executor,
            f"""
python -c 'import importlib; [importlib.import_module(m) for m in {modules}]; print("imported")'
command -v soffice node pandoc || echo "no office tools"
""",
        )
    finally:
        executor.close()
    assert result_run.stdout == "imported\nno office tools\n"
