"""No active content from the service's origin (issue 39, class 2).

A run's ``out/report.html`` (or an SVG, or any file a run, a skill or a user wrote) opened from
the service would run its script on the service's origin, where same-origin requests start
runs.  Every answer of written bytes is an attachment (a few passive types inline), never
sniffed, in a sandboxed document without script or subresources; every answer of the API is
``nosniff``.  Shown over HTTP for every endpoint (GET, HEAD, ranges) and in a real headless
Chromium against a real running service: the hostile page's script does not run, and no
request leaves it -- neither to the service nor to a canary server on loopback.
"""

from __future__ import annotations

import base64
import http.server
import io
import json
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from skill_executor.web.content import SANDBOX_CSP, disposition, download_headers, is_passive, safe_filename

from ..api_server import Server
from ..browser import Browser, chromium_problem

# -- the rule (pure logic) ---------------------------------------------------------------------


def test_only_passive_types_are_inline() -> None:
    for kind in ("text/plain", "text/plain; charset=utf-8", "application/json", "image/png", "IMAGE/JPEG", "image/gif"):
        assert is_passive(kind) and disposition("x", kind).startswith("inline;"), kind
    for kind in (
        "text/html",
        "image/svg+xml",
        "application/xhtml+xml",
        "application/xml",
        "text/xml",
        "application/pdf",  # PDF viewers run document script: a download
        "text/javascript",
        "text/markdown",
        "application/octet-stream",
        "multipart/x-mixed-replace",
        "",
    ):
        assert not is_passive(kind) and disposition("x", kind).startswith("attachment;"), kind
    assert download_headers("a.html", "text/html") == {
        "Content-Disposition": 'attachment; filename="a.html"',
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "sandbox; default-src 'none'",
    }


def test_file_names_cannot_break_the_header_or_disguise_themselves() -> None:
    assert safe_filename("out/report.html") == "report.html"
    assert safe_filename("..\\..\\evil.html") == "evil.html"
    assert safe_filename("") == safe_filename("...") == "download"
    assert safe_filename(".bashrc") == "bashrc"  # no hidden file
    assert safe_filename("gnp.\u202eexe.html") == "gnp._exe.html"  # a bidi override cannot flip the extension
    value = disposition('a"; filename=evil.html\r\nSet-Cookie: x=1', "text/html")
    assert "\r" not in value and "\n" not in value and value.count('"') == 2
    assert value.startswith('attachment; filename="a__filename_evil.html_Set-Cookie__x_1"')
    unicode = disposition("résumé.txt", "text/plain")
    assert unicode == "inline; filename=\"r_sum_.txt\"; filename*=UTF-8''r%C3%A9sum%C3%A9.txt"
    assert disposition("\udcff\udcfe.bin", "application/octet-stream").isascii()  # undecodable name bytes
    assert len(safe_filename("x" * 500 + ".html")) == 150 and safe_filename("x" * 500 + ".html").endswith(".html")


def test_the_worker_answers_carry_the_headers_too(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from skill_executor.api.worker import create_worker_app
    from skill_executor.config import Settings

    app = create_worker_app(Settings(data_dir=tmp_path), claim=None, on_exit=lambda code: None)  # type: ignore[arg-type]
    answer = TestClient(app).get("/v1/nothing-here")  # no lifespan: only the middleware's work is seen
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["content-security-policy"] == SANDBOX_CSP


def test_the_pod_servers_rule_is_the_services() -> None:
    from skill_executor.podserver import rest

    assert (rest.NOSNIFF, rest.SANDBOX_CSP) == ("nosniff", SANDBOX_CSP)
    assert rest.attachment("report.html") == disposition("report.html", "application/octet-stream")
    assert rest.attachment('a"b\r\n.html').isascii() and "\r" not in rest.attachment('a"b\r\n.html')
    assert rest.attachment('a"b\r\n.html').count('"') == 2


# -- the real service ----------------------------------------------------------------------------


class Canary:
    """A loopback HTTP server that counts what reaches it; ``/control.html`` serves a page as a
    plain server would (text/html, no headers): the positive control of the browser test."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.page = b""
        canary = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _hit(self) -> None:
                canary.hits.append(f"{self.command} {self.path}")
                body = canary.page if self.path == "/control.html" else b"ok"
                self.send_response(200)
                self.send_header("Content-Type", "text/html" if self.path == "/control.html" else "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _hit  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def canary() -> Iterator[Canary]:
    found = Canary()
    yield found
    found.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """No API keys (loopback development): a browser reaches every URL as it is."""
    srv = Server(tmp_path_factory.mktemp("content-safety")).start(timeout=120)
    yield srv
    srv.stop()


#: What the page's DOM holds once its script ran (the script's text alone never does).
MARKER = 'data-marker="SCRIPT-RAN"'


def _script(canary: int) -> str:
    """What a hostile page runs: marks itself, starts a run on the service (same origin), and
    calls a canary on loopback three ways."""
    run = json.dumps({"skill": "math-tools", "command": "echo pwned"})
    return (
        'document.title = "PWNED";'
        '(document.body || document.documentElement).setAttribute("data-marker", "SCRIPT-RAN");'
        f'fetch("/v1/runs", {{method: "POST", headers: {{"Content-Type": "application/json"}}, body: {run!r}}});'
        f'fetch("http://127.0.0.1:{canary}/fetch", {{mode: "no-cors"}});'
        f'navigator.sendBeacon("http://127.0.0.1:{canary}/beacon", "x");'
        f'new Image().src = "http://127.0.0.1:{canary}/image";'
    )


def hostile_html(canary: int) -> str:
    return (
        "<!doctype html><html><head><title>report</title></head><body><p>quarterly report</p>"
        f'<img src="http://127.0.0.1:{canary}/img-tag"><script>{_script(canary)}</script></body></html>'
    )


def hostile_svg(canary: int) -> str:
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="10" height="10">'
        f'<image href="http://127.0.0.1:{canary}/svg-image" width="10" height="10"/>'
        f"<script>{_script(canary)}</script></svg>"
    )


@pytest.fixture(scope="module")
def written(server: Server, canary: Canary) -> dict[str, Any]:
    """A real run writes the hostile page and SVG (and a PNG and a PDF) into out/, saved: their
    file ids and refs."""
    files = {
        "report.html": hostile_html(canary.port).encode(),
        "chart.svg": hostile_svg(canary.port).encode(),
        "notes.txt": hostile_html(canary.port).encode(),  # HTML in a .txt: stays text
        "doc.pdf": b"%PDF-1.4\n1 0 obj<</Type/Catalog/OpenAction<</S/JavaScript/JS(app.alert(1))>>>>endobj\n",
        "pixel.png": base64.b64decode(
            "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
        ),
    }
    command = "mkdir -p out && " + " && ".join(
        f"echo {base64.b64encode(data).decode()} | base64 -d > out/{name}" for name, data in files.items()
    )
    answer = httpx.post(
        f"{server.url}/v1/runs",
        json={"skill": "math-tools", "command": command, "outputs": {"globs": ["out/*"], "save": True}},
        timeout=120,
    )
    assert answer.status_code == 200, answer.text
    result = answer.json()
    assert result["exit_code"] == 0, result
    saved = {f["name"].removeprefix("out/"): f for f in result["output_files"]}
    assert set(saved) == set(files), saved
    assert saved["report.html"]["mime_type"] == "text/html" and saved["chart.svg"]["mime_type"] == "image/svg+xml"
    return saved


def _safe(answer: httpx.Response, kind: str, name: str | None = None) -> None:
    """The answer carries the three headers: attachment (or inline when passive), nosniff, sandbox."""
    where = f"{answer.request.method} {answer.request.url} -> {answer.status_code}"
    assert answer.headers.get("x-content-type-options") == "nosniff", where
    assert answer.headers.get("content-security-policy") == SANDBOX_CSP, where
    wanted = "inline" if kind == "inline" else "attachment"
    value = answer.headers.get("content-disposition", "")
    assert value.split(";")[0] == wanted, (where, value)
    if name is not None:
        assert f'filename="{name}"' in value, (where, value)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("report.html", "attachment"),
        ("chart.svg", "attachment"),
        ("doc.pdf", "attachment"),
        ("notes.txt", "inline"),
        ("pixel.png", "inline"),
    ],
)
def test_run_outputs_by_file_id_and_by_ref(server: Server, written: dict[str, Any], name: str, kind: str) -> None:
    entry = written[name]
    urls = [f"{server.url}/v1/files/{entry['file_id']}/content"]
    artifact, _, version = entry["ref"].removeprefix("artifact://").rpartition("@")
    urls.append(f"{server.url}/v1/artifacts/{artifact}?version={version}")  # the run's output ref
    with httpx.Client(timeout=30) as http:
        for url in urls:
            got = http.get(url)
            assert got.status_code == 200, got.text
            _safe(got, kind, name)
            ranged = http.get(url, headers={"Range": "bytes=0-3"})
            assert ranged.status_code in (200, 206)
            _safe(ranged, kind, name)
            head = http.head(url)
            assert head.headers.get("x-content-type-options") == "nosniff"
            if head.status_code == 200:
                _safe(head, kind, name)


def test_uploads_skill_files_versions_and_renderings(server: Server, canary: Canary) -> None:
    page = hostile_html(canary.port).encode()
    with httpx.Client(base_url=server.url, timeout=60) as http:
        # a user's upload typed text/html, and one typed text/plain (stays inline text)
        uploaded = http.post(
            "/v1/files", params={"name": "up.html"}, content=page, headers={"Content-Type": "text/html"}
        )
        assert uploaded.status_code == 201, uploaded.text
        _safe(http.get(f"/v1/files/{uploaded.json()['id']}/content"), "attachment", "up.html")
        put = http.post("/v1/artifacts/page.txt", content=page, headers={"Content-Type": "text/plain"})
        assert put.status_code == 201, put.text
        _safe(http.get("/v1/artifacts/page.txt"), "inline", "page.txt")
        # a skill's own files and its version's archive (an install is a new version)
        archive = io.BytesIO()
        with zipfile.ZipFile(archive, "w") as zf:
            zf.writestr("hostile/SKILL.md", "---\nname: hostile\ndescription: A hostile skill.\n---\n# hostile\n")
            zf.writestr("hostile/assets/page.html", page)
            zf.writestr("hostile/assets/pic.svg", hostile_svg(canary.port))
        installed = http.post("/v1/skills", content=archive.getvalue(), headers={"Content-Type": "application/zip"})
        assert installed.status_code in (200, 201), installed.text
        _safe(http.get("/v1/skills/hostile/files/assets/page.html"), "attachment", "page.html")
        _safe(http.get("/v1/skills/hostile/files/assets/pic.svg"), "attachment", "pic.svg")
        _safe(http.get("/v1/skills/hostile/files/SKILL.md"), "attachment", "SKILL.md")
        version = installed.json()["version"]
        _safe(http.get("/v1/skills/hostile/versions/latest/content"), "attachment", f"hostile-{version}.zip")
        # a context rendering: the skills' text, as xml (an attachment) and as text (inline)
        xml = http.get("/v1/sessions/s1/context/render", params={"format": "xml", "raw": "true"})
        _safe(xml, "attachment", "context-s1.xml")
        _safe(http.get("/v1/sessions/s1/context/render", params={"format": "text", "raw": "true"}), "inline")


def test_every_api_answer_is_nosniff(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        answers = [
            http.get("/healthz"),
            http.get("/v1/skills"),
            http.get("/v1/skills", params={"format": "xml"}),
            http.get("/v1/files/nope"),  # an error
            http.get("/v1/runs/nope"),
            http.post("/v1/runs", content=b"{"),  # a validation error
            http.get("/v1/sessions/s1/processes/p-000000000000/events"),  # 404 before a stream
            http.get("/no-such-route"),
            http.get("/openapi.json"),
            http.post("/v1/runs", json={}, headers={"Origin": "http://evil.example"}),  # the guard's refusal
        ]
        for answer in answers:
            where = f"{answer.request.method} {answer.request.url.path} -> {answer.status_code}"
            assert answer.headers.get("x-content-type-options") == "nosniff", where
            assert answer.headers.get("content-security-policy") == SANDBOX_CSP, where
            if answer.headers.get("content-type", "").startswith("application/json"):
                assert "content-disposition" not in answer.headers, where  # the API's own answers: as they are
        xml = http.get("/v1/skills", params={"format": "xml"})
        assert xml.headers["content-disposition"].startswith("attachment")  # skills' text as XML: a download
        docs = http.get("/docs")  # the service's own page runs its own script: nosniff only
        assert docs.status_code == 200 and docs.headers["x-content-type-options"] == "nosniff"
        assert "content-security-policy" not in docs.headers and "content-disposition" not in docs.headers


# -- in a real browser ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    problem = chromium_problem()
    if problem is not None:
        pytest.skip(problem)
    found = Browser(tmp_path_factory.mktemp("chromium"))
    yield found
    found.close()


def _service_requests(server: Server, since: int) -> list[tuple[str, str]]:
    """(method, path) of every request the service logged after line ``since``."""
    seen = []
    for line in server.log_lines()[since:]:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("message") == "request":
            seen.append((entry["method"], entry["path"]))
    return seen


def test_the_browser_control_runs_the_hostile_page(browser: Browser, canary: Canary) -> None:
    """The harness sees what it claims: the same page served as a plain server would serves it
    runs its script, which reaches the canary."""
    canary.page = hostile_html(canary.port).encode()
    before = len(canary.hits)
    visit = browser.open(f"http://127.0.0.1:{canary.port}/control.html")
    assert visit.title == "PWNED" and MARKER in (visit.html or "")
    hits = canary.hits[before:]
    assert "GET /fetch" in hits and "GET /img-tag" in hits and "POST /v1/runs" in hits, hits


@pytest.mark.parametrize("name", ["report.html", "chart.svg", "notes.txt", "doc.pdf"])
def test_a_hostile_output_opened_in_a_browser_runs_nothing_and_sends_nothing(
    browser: Browser, server: Server, canary: Canary, written: dict[str, Any], name: str
) -> None:
    url = f"{server.url}/v1/files/{written[name]['file_id']}/content"
    runs_before = httpx.get(f"{server.url}/v1/runs", timeout=30).json()["runs"]
    lines, hits = len(server.log_lines()), len(canary.hits)
    visit = browser.open(url)
    assert visit.title != "PWNED" and MARKER not in (visit.html or ""), visit
    assert canary.hits[hits:] == [], canary.hits[hits:]  # nothing reached the canary
    requested = _service_requests(server, lines)
    ours = {("GET", "/v1/runs"), ("GET", "/favicon.ico")}  # the test's own listing (logged late), the browser's icon
    assert [r for r in requested if r not in ours] == [("GET", url.removeprefix(server.url))], requested
    assert httpx.get(f"{server.url}/v1/runs", timeout=30).json()["runs"] == runs_before  # no run started
    sent = [u for u in visit.request_urls() if u != url and not u.endswith("/favicon.ico")]
    assert sent == [], sent  # the page asked for nothing (even a request the CSP would block)
    if name == "notes.txt":  # passive: shown inline as text, the markup inert
        assert visit.downloads == [] and "&lt;script&gt;" in (visit.html or "")
    else:  # active or a document format: saved, never shown
        assert visit.downloads == [name], visit.downloads
