"""Results an agent can trust, and the skill-folder placeholders of published skills.

Pure logic (MIME typing, placeholder expansion, name matching, tool-result shapes) is
tested directly; the routes, the tool calls and a failing run on the real service.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from skill_executor.errors import NotFound
from skill_executor.outputs.mime import detect
from skill_executor.registry import SkillRepository
from skill_executor.runs.models import RunRequest, RunResult
from skill_executor.skills import expand_placeholders, find_file, load_skill, match_path, sandbox_dir
from skill_executor.tools import ToolExecutor, run_result
from skill_executor_client import ApiError, Client
from skill_executor_client.calls import Calls

from ..api_server import Server, api_runtime
from ..conftest import REPO

BODY = """# Forms

Read FORMS.md first. Run:

    python {baseDir}/scripts/fill.py in.pdf
    python ${CLAUDE_SKILL_DIR}/scripts/check.py $CLAUDE_SKILL_DIR/x $CLAUDE_SKILL_DIRS
    cd <path-to-skill> && ls
"""


def _zip(*members: tuple[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members:
            zf.writestr(name, data)
    return buf.getvalue()


DOCX = _zip(
    (
        "[Content_Types].xml",
        b'<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>',
    ),
    ("word/document.xml", b"<w:document/>"),
)


def write_skill(root: Path, name: str = "forms-skill") -> Path:
    skill = root / name
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text(f"---\nname: {name}\ndescription: Fills forms.\n---\n{BODY}")
    (skill / "forms.md").write_text("Forms guide: run {baseDir}/scripts/fill.py\n")
    (skill / "reference.md").write_text("Reference.\n")
    (skill / "references").mkdir()
    (skill / "references" / "guide.md").write_text("guide\n")
    (skill / "scripts" / "fill.py").write_text("print('fill')\n")
    return skill


# -- MIME -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("out/report.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
        ("Book.XLSX", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
        ("deck.pptx", "application/vnd.openxmlformats-officedocument.presentationml.presentation"),
        ("a.odt", "application/vnd.oasis.opendocument.text"),
        ("a.ods", "application/vnd.oasis.opendocument.spreadsheet"),
        ("a.odp", "application/vnd.oasis.opendocument.presentation"),
        ("book.epub", "application/epub+zip"),
        ("lib.jar", "application/java-archive"),
        ("pkg-1.0-py3-none-any.whl", "application/x-wheel+zip"),
        ("app.apk", "application/vnd.android.package-archive"),
        ("plain.zip", "application/zip"),
    ],
)
def test_zip_based_formats_are_typed_by_extension(name: str, expected: str) -> None:
    assert detect(name, DOCX[:8192], complete=len(DOCX) <= 8192) == expected
    assert detect(name, DOCX[:64], complete=False) == expected  # the head of a big archive


def test_zip_extension_without_zip_content_is_not_trusted() -> None:
    assert detect("fake.docx", b"just text\n", complete=True) == "text/plain"
    assert detect("fake.xlsx", b"%PDF-1.4\n" + b"\x00" * 100, complete=True) == "application/pdf"
    assert (
        detect("archive.bin", DOCX, complete=True) != "application/vnd.openxmlformats-officedocument."
        "wordprocessingml.document"
    )


# -- placeholders -----------------------------------------------------------------------


def test_placeholders_are_replaced_whole_tokens_only() -> None:
    out = expand_placeholders(BODY, "/workspace/skills/forms-skill")
    assert "python /workspace/skills/forms-skill/scripts/fill.py in.pdf" in out
    assert (
        "python /workspace/skills/forms-skill/scripts/check.py /workspace/skills/forms-skill/x $CLAUDE_SKILL_DIRS"
        in out
    )
    assert "cd /workspace/skills/forms-skill && ls" in out
    assert "{baseDir}" not in out and "<path-to-skill>" not in out
    assert (
        expand_placeholders("{basedir} ${CLAUDE_SKILL_DIR_X} $CLAUDE_SKILL_DIR_2", "/s")
        == "{basedir} ${CLAUDE_SKILL_DIR_X} $CLAUDE_SKILL_DIR_2"
    )


def test_sandbox_dir_follows_the_runtime(tmp_path: Path) -> None:
    skill = load_skill(write_skill(tmp_path))
    assert sandbox_dir(skill, "/workspace/skills") == "/workspace/skills/forms-skill"
    assert sandbox_dir(skill, None) == str((tmp_path / "forms-skill").resolve())


# -- name matching ----------------------------------------------------------------------


def test_doc_names_match_ignoring_case_with_suggestions(tmp_path: Path) -> None:
    skill = load_skill(write_skill(tmp_path))
    available = ["forms.md", "reference.md", "references/guide.md"]
    exact = match_path(skill, "forms.md", available)
    assert exact.path == "forms.md" and exact.note is None
    folded = match_path(skill, "FORMS.md", available)
    assert folded.path == "forms.md" and folded.note == "'FORMS.md' matched 'forms.md' ignoring case"
    # exact wins over a case-insensitive twin
    assert match_path(skill, "Forms.md", ["forms.md", "Forms.md"]).note is None
    with pytest.raises(NotFound) as several:
        match_path(skill, "FORMS.MD", ["forms.md", "Forms.md"])
    assert several.value.code == "doc_not_found"
    assert several.value.message == "skill 'forms-skill' has no doc 'FORMS.MD'; did you mean 'forms.md' or 'Forms.md'?"
    with pytest.raises(NotFound) as close:
        match_path(skill, "refrence.md", available)
    assert "did you mean 'reference.md'" in close.value.message
    with pytest.raises(NotFound) as elsewhere:
        match_path(skill, "GUIDE.md", available)
    assert "did you mean 'references/guide.md'" in elsewhere.value.message
    with pytest.raises(NotFound) as nothing:
        match_path(skill, "zzzz.pdf", available)
    assert nothing.value.message == "skill 'forms-skill' has no doc 'zzzz.pdf'"


def test_files_match_ignoring_case(tmp_path: Path) -> None:
    skill = load_skill(write_skill(tmp_path))
    assert find_file(skill, "scripts/fill.py").note is None
    found = find_file(skill, "SCRIPTS/Fill.py")
    assert found.path == "scripts/fill.py" and found.note
    assert find_file(skill, "skill.md").path == "SKILL.md"
    with pytest.raises(NotFound) as missing:
        find_file(skill, "scripts/fil.py")
    assert missing.value.code == "file_not_found" and "did you mean 'scripts/fill.py'" in missing.value.message


# -- tool results -----------------------------------------------------------------------


def _result(**fields: object) -> RunResult:
    values: dict[str, object] = {"run_id": "r1", "skill": "forms-skill", "exit_code": 0, "duration_ms": 5}
    values.update(fields)
    return RunResult.model_validate(values)


@pytest.mark.parametrize(
    ("fields", "status"),
    [
        ({"exit_code": 127, "stderr": "bash: python: command not found\n"}, "exit code 127"),
        ({"exit_code": 1}, "exit code 1"),
        ({"exit_code": 137, "signal": "SIGKILL", "timed_out": True}, "timed out (exit code 137)"),
        ({"exit_code": 137, "signal": "SIGKILL", "oom_killed": True}, "out of memory (exit code 137)"),
        ({"exit_code": 143, "signal": "SIGTERM"}, "killed by SIGTERM (exit code 143)"),
        ({"exit_code": None}, "no exit code"),
    ],
)
def test_failed_runs_are_tool_errors_with_the_whole_result(fields: dict[str, object], status: str) -> None:
    result = run_result(_result(stdout="partial\n", **fields))
    assert result.is_error
    assert result.content.startswith(f"error: the command failed: {status} in 5 ms"), result.content
    assert "stdout:\npartial" in result.content and result.data["stdout"] == "partial\n"
    assert result.message("anthropic", "tu_1") == {
        "type": "tool_result",
        "tool_use_id": "tu_1",
        "content": result.content,
        "is_error": True,
    }
    assert result.message("mcp", "1") == {"content": [{"type": "text", "text": result.content}], "isError": True}
    assert result.message("openai", "call_1") == {"role": "tool", "tool_call_id": "call_1", "content": result.content}


def test_successful_run_is_no_tool_error() -> None:
    result = run_result(_result(stdout="ok\n"))
    assert not result.is_error and result.content.startswith("exit code 0 in 5 ms")
    assert result.message("anthropic", "t")["is_error"] is False and result.message("mcp", "t")["isError"] is False


def test_skill_run_tool_with_a_failing_command(tmp_path: Path) -> None:
    write_skill(tmp_path)

    def run(request: RunRequest) -> RunResult:
        return _result(exit_code=127, stderr="python: not found\n")

    tools = ToolExecutor(SkillRepository([tmp_path]), run)
    called = tools.call("skill_run", {"skill": "forms-skill", "command": "python x.py"})
    assert called.is_error and "python: not found" in called.content and called.data["exit_code"] == 127


def test_tools_expand_placeholders_and_match_docs(tmp_path: Path) -> None:
    write_skill(tmp_path)
    tools = ToolExecutor(SkillRepository([tmp_path]), visible_skills_dir="/workspace/skills")
    loaded = tools.call("skill_load", {"skill": "forms-skill", "docs": ["FORMS.md"]})
    assert not loaded.is_error, loaded.content
    assert "python /workspace/skills/forms-skill/scripts/fill.py" in loaded.content
    assert "{baseDir}" not in loaded.content and "{baseDir}" not in loaded.data["body"]
    assert "## Doc: forms.md ('FORMS.md' matched 'forms.md' ignoring case)" in loaded.content
    assert "run /workspace/skills/forms-skill/scripts/fill.py" in loaded.content
    selected = tools.call("skill_select_docs", {"skill": "forms-skill", "docs": ["Forms.MD"]})
    assert selected.data["docs"][0]["path"] == "forms.md" and selected.data["docs"][0]["note"]
    missing = tools.call("skill_select_docs", {"skill": "forms-skill", "docs": ["refrence.md"]})
    assert missing.is_error and "did you mean 'reference.md'" in missing.content
    assert missing.content.endswith("(available: forms.md, reference.md, references/guide.md)")
    local = ToolExecutor(SkillRepository([tmp_path])).call("skill_load", {"skill": "forms-skill"})
    assert f"python {(tmp_path / 'forms-skill').resolve()}/scripts/fill.py" in local.content


# -- CLI --------------------------------------------------------------------------------


def _cli(
    *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
    clean.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "skill_executor.cli.main", *args],
        cwd=REPO,
        input=stdin,
        capture_output=True,
        env=clean,
        timeout=60,
        check=False,
    )


def test_cli_artifacts_put_sniffs_the_mime_type(tmp_path: Path) -> None:
    data = tmp_path / "data"
    source = tmp_path / "report.docx"
    source.write_bytes(DOCX)
    put = _cli("artifacts", "put", "reports/q3.docx", str(source), "--data-dir", str(data))
    assert put.returncode == 0, put.stderr
    assert (
        json.loads(put.stdout)["mime_type"] == "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    )
    big = b"name,value\n" + b"a,1\n" * 5000  # beyond the sniffed head: still saved whole
    piped = _cli("artifacts", "put", "table.csv", "-", "--data-dir", str(data), stdin=big)
    info = json.loads(piped.stdout)
    assert info["mime_type"] == "text/csv" and info["size"] == len(big), piped.stderr
    got = _cli("artifacts", "get", "table.csv", "--data-dir", str(data))
    assert got.stdout == big
    explicit = _cli("artifacts", "put", "x.docx", str(source), "--data-dir", str(data), "--mime-type", "text/x-mine")
    assert json.loads(explicit.stdout)["mime_type"] == "text/x-mine"


def test_cli_skills_show_expands_placeholders(tmp_path: Path) -> None:
    write_skill(tmp_path)
    shown = _cli("skills", "show", "forms-skill", "--root", str(tmp_path), "--runtime", "docker")
    body = json.loads(shown.stdout)["body"]
    assert "python /workspace/skills/forms-skill/scripts/fill.py" in body, shown.stderr
    local = json.loads(_cli("skills", "show", "forms-skill", "--root", str(tmp_path), "--runtime", "local").stdout)
    assert f"cd {(tmp_path / 'forms-skill').resolve()} && ls" in local["body"]
    raw = json.loads(_cli("skills", "show", "forms-skill", "--root", str(tmp_path), "--raw").stdout)
    assert "{baseDir}" in raw["body"] and "<path-to-skill>" in raw["body"]


# -- the service ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("results"))
    srv.start()
    write_skill(srv.skills_dir)
    yield srv
    srv.stop()


def _skill_dir(srv: Server) -> str:
    if api_runtime() == "docker":
        return "/workspace/skills/forms-skill"
    return str((srv.skills_dir / "forms-skill").resolve())


def test_api_serves_bodies_and_docs_with_placeholders_replaced(server: Server) -> None:
    where = _skill_dir(server)
    with Client(server.url) as client:
        loaded = client.load_skill("forms-skill")
        assert f"python {where}/scripts/fill.py in.pdf" in loaded.body and "{baseDir}" not in loaded.body
        doc = client.read_docs("forms-skill", ["FORMS.md"]).docs[0]
        assert doc.path == "forms.md" and doc.note == "'FORMS.md' matched 'forms.md' ignoring case"
        assert doc.content == f"Forms guide: run {where}/scripts/fill.py\n"
        with pytest.raises(ApiError) as missing:
            client.read_docs("forms-skill", ["refrence.md"])
        assert missing.value.status == 404 and missing.value.code == "doc_not_found"
        assert "did you mean 'reference.md'" in missing.value.message
        raw = client.read_file("forms-skill", "SKILL.md")
        assert b"{baseDir}" in raw and b"<path-to-skill>" in raw  # a file read is the file as written
        folded = client.send(Calls.read_file("forms-skill", "FORMS.md"))  # the response: its headers
        assert folded.headers["x-resolved-path"] == "forms.md" and folded.text.startswith("Forms guide: run {baseDir}")
        assert "x-resolved-path" not in client.send(Calls.read_file("forms-skill", "forms.md")).headers
        with pytest.raises(ApiError) as nofile:
            client.read_file("forms-skill", "scripts/fil.py")
        assert nofile.value.code == "file_not_found" and "did you mean 'scripts/fill.py'?" in nofile.value.message


def test_api_artifact_without_content_type_is_sniffed(server: Server) -> None:
    url = f"{server.url}/v1/artifacts"
    sniffed = httpx.post(f"{url}/deck.pptx", content=DOCX)
    assert "content-type" not in sniffed.request.headers
    assert (
        sniffed.status_code == 201
        and sniffed.json()["mime_type"] == "application/vnd.openxmlformats-officedocument.presentationml.presentation"
    )
    assert (
        httpx.get(f"{url}/deck.pptx")
        .headers["content-type"]
        .startswith("application/vnd.openxmlformats-officedocument.presentationml.presentation")
    )
    assert httpx.post(f"{url}/data.json", content=b'{"a": 1}').json()["mime_type"] == "application/json"
    kept = httpx.post(f"{url}/blob.docx", content=DOCX, headers={"Content-Type": "application/octet-stream"})
    assert kept.json()["mime_type"] == "application/octet-stream"  # an explicit type is kept
    with Client(server.url) as client:  # the client sends no type unless given one
        assert (
            client.put_artifact("client/deck.pptx", DOCX).mime_type
            == "application/vnd.openxmlformats-officedocument.presentationml.presentation"
        )
        assert client.put_artifact("client/notes.txt", b"x", mime_type="text/markdown").mime_type == "text/markdown"


def test_tool_call_with_failing_command_is_an_error_and_outputs_are_typed(server: Server) -> None:
    with Client(server.url) as client:
        failed = client.call_tool("skill_run", {"skill": "forms-skill", "command": "no-such-command-xyz"})
        assert failed.is_error and failed.content.startswith("error: the command failed: exit code 127")
        assert failed.data["exit_code"] == 127 and "not found" in failed.data["stderr"]
        assert failed.message is None  # no format asked for
        arguments = {"skill": "forms-skill", "command": "exit 3"}
        anthropic = client.call_tool("skill_run", arguments, format="anthropic", call_id="toolu_1").message
        assert anthropic["type"] == "tool_result" and anthropic["tool_use_id"] == "toolu_1"
        assert anthropic["is_error"] is True and anthropic["content"].startswith("error:")
        openai = client.call_tool("skill_run", arguments, format="openai", call_id="call_1").message
        assert openai == {"role": "tool", "tool_call_id": "call_1", "content": openai["content"]}
        assert openai["content"].startswith("error:")
        mcp = client.call_tool("skill_run", arguments, format="mcp").message
        assert mcp["isError"] is True and mcp["content"][0]["type"] == "text"
        with pytest.raises(ApiError) as no_id:
            client.call_tool("skill_run", arguments, format="anthropic")
        assert no_id.value.status == 400 and no_id.value.code == "tool_call_id_missing"
        script = (
            "import zipfile; z = zipfile.ZipFile('out/r.docx', 'w'); "
            "z.writestr('[Content_Types].xml', '<Types/>'); z.writestr('word/document.xml', '<d/>'); z.close()"
        )
        ok = client.call_tool(
            "skill_run", {"skill": "forms-skill", "command": f'python3 -c "{script}"', "outputs": {"globs": ["out/**"]}}
        )
        assert not ok.is_error, ok.content
        typed = {f["name"]: f["mime_type"] for f in ok.data["output_files"]}
        assert typed == {"out/r.docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document"}
