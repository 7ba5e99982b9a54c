"""The tool-result budget (skill_executor/tools/budget.py): pure shaping of a run's result for
each surface -- head and tail of long streams, files inline or by reference, images as
blocks, every file byte at most once, and the whole model view within ``max_chars``."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from skill_executor.core import Executor

from skill_executor.runs.models import RunRequest, RunResult
from skill_executor.tools import ToolResult, keep_outputs, run_result
from skill_executor.tools.budget import (
    BudgetOverride,
    Embedded,
    Image,
    Link,
    ResultBudget,
    Text,
    head_tail,
    marker,
    shape_run,
    split,
)

from ..conftest import make_settings

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 60).decode()
REF = "artifact://runs/r1/out"


def _file(name: str, content: str | None, *, size: int, mime: str = "text/plain", **extra: Any) -> dict[str, Any]:
    encoding = None if content is None else extra.pop("encoding", "utf-8")
    return {
        "name": name,
        "mime_type": mime,
        "size_bytes": size,
        "content": content,
        "encoding": encoding,
        "ref": extra.pop("ref", f"{REF}/{name}@1"),
        **extra,
    }


def _result(**fields: Any) -> RunResult:
    values: dict[str, Any] = {"run_id": "r1", "skill": "s", "exit_code": 0, "duration_ms": 5}
    values.update(fields)
    return RunResult.model_validate(values)


def _big() -> RunResult:
    """A run that printed 1 MB and wrote a 1.5 MB text file, a small text file and a PNG."""
    stdout = "".join(f"line {i:07d} " + "x" * 87 + "\n" for i in range(10_000))
    big = "y" * 99 + "\n"
    return _result(
        stdout=stdout,
        stderr="warning: something\n" * 3,
        output_files=[
            _file("out/big.txt", big * 15_000, size=1_500_000),
            _file("out/small.txt", "hello\n", size=6),
            _file("out/red.png", PNG, size=68, mime="image/png", encoding="base64"),
        ],
    )


def test_head_tail_keeps_both_ends_around_the_marker() -> None:
    text = "".join(f"{i}\n" for i in range(10_000))
    cut = head_tail(text, 1_000, lambda hidden: f"[{hidden} hidden]")
    assert len(cut) <= 1_000
    assert cut.startswith("0\n1\n2\n") and cut.endswith("9998\n9999\n")
    head, hidden, tail = cut.partition("\n[")[0], cut.split("[")[1].split(" ")[0], cut.rsplit("]\n", 1)[1]
    assert len(head) + 1 + int(hidden) + len(tail) == len(text)  # what is hidden is exactly what is missing
    assert head.endswith("\n") is False and cut.split("\n[")[0].split("\n")[-1].isdigit()  # cut at a line end
    assert head_tail("short", 10, lambda hidden: "x") == "short"


def test_split_gives_small_parts_what_they_need() -> None:
    assert split(100, [10, 1_000]) == [10, 90]
    assert split(100, [1_000, 1_000]) == [50, 50]
    assert split(100, [10, 20]) == [10, 20]
    assert split(-5, [10]) == [0]


def test_a_large_run_fits_the_budget_on_every_surface() -> None:
    result = _big()
    budget = ResultBudget()
    for surface in ("text", "anthropic", "mcp"):
        shaped = shape_run(result, budget, surface, failed=False, stream_refs={"stdout": f"{REF}/stdout@1"})
        assert shaped.chars() <= budget.max_chars, (surface, shaped.chars())
        assert shaped.cut == ["stdout"]
        text = shaped.text
        # head and tail of stdout, and the marker naming where the whole is
        assert "line 0000000" in text and "line 0009999" in text and "line 0005000" not in text
        assert f"of stdout cut to fit the tool-result budget; the full stdout: {REF}/stdout@1]" in text
        assert "warning: something" in text  # the short stderr is whole
        assert (
            f"file out/big.txt (text/plain, 1500000 bytes): over the inline size (16384 bytes); "
            f"full content at {REF}/out/big.txt@1" in text
        )
        assert "y" * 99 not in text  # the big file is only referred to
        # the structured view: the same excerpt, no file content, the cut said
        structured = shaped.structured
        assert structured["stdout"] in text and structured["stdout_truncated"] is True
        assert structured["stderr"] == result.stderr
        assert all(f["content"] is None and f["encoding"] is None for f in structured["output_files"])
        assert [f["ref"] for f in structured["output_files"]] == [f.ref for f in result.output_files]


def test_each_surface_carries_each_file_once() -> None:
    result = _big()
    text_only = shape_run(result, ResultBudget(), "text", failed=False)
    assert text_only.blocks[1:] == [] and text_only.text.count("hello") == 1
    assert "the image below" not in text_only.text and PNG not in text_only.text  # no image blocks here

    anthropic = shape_run(result, ResultBudget(), "anthropic", failed=False)
    assert anthropic.blocks[1:] == [Image(f"{REF}/out/red.png@1", "image/png", PNG)]
    assert anthropic.text.count("hello") == 1

    mcp = shape_run(result, ResultBudget(), "mcp", failed=False)
    kinds = [type(b) for b in mcp.blocks]
    assert kinds == [Text, Link, Embedded, Image]
    assert "hello" not in mcp.text  # embedded below, not also in the text
    embedded = mcp.blocks[2]
    assert isinstance(embedded, Embedded) and embedded.text == "hello\n" and embedded.uri.endswith("small.txt@1")
    link = mcp.blocks[1]
    assert isinstance(link, Link) and link.size == 1_500_000 and link.uri == f"{REF}/out/big.txt@1"
    everything = json.dumps([mcp.text, mcp.structured])
    assert everything.count("hello") == 0 and PNG not in everything


def test_an_unkept_stream_says_so_and_the_run_cut_is_told() -> None:
    result = _result(stdout="z" * 50_000, stdout_truncated=True, exit_code=2)
    shaped = shape_run(result, ResultBudget(max_chars=5_000), "text", failed=True)
    assert shaped.text.startswith("error: the command failed: exit code 2")
    assert "the full stdout was not kept; the run itself kept only the first part of its stdout]" in shaped.text
    assert len(shaped.text) <= 5_000
    whole = shape_run(_result(stdout="ok\n", stdout_truncated=True), ResultBudget(), "text", failed=False)
    assert "ok [cut by the run: stdout_max_bytes]" in whole.text and whole.structured["stdout"] == "ok\n"


def test_small_results_are_unchanged() -> None:
    result = _result(stdout="ok\n", output_files=[_file("out/a.txt", "a\n", size=2)])
    shaped = shape_run(result, ResultBudget(), "text", failed=False)
    assert shaped.cut == [] and shaped.structured["stdout"] == "ok\n"
    assert (
        shaped.text == f"exit code 0 in 5 ms\nstdout:\nok\nfile out/a.txt (text/plain, 2 bytes, {REF}/out/a.txt@1):\na"
    )


def test_many_files_and_warnings_still_fit() -> None:
    files = [_file(f"out/{i:04d}-" + "n" * 150 + ".txt", "c" * 10_000, size=10_000) for i in range(200)]
    result = _result(stdout="s" * 10_000, output_files=files, warnings=["w" * 5_000] * 50)
    budget = ResultBudget(max_chars=MIN)
    for surface in ("text", "mcp"):
        shaped = shape_run(result, budget, surface, failed=False)
        assert shaped.chars() <= budget.max_chars, shaped.chars()
        assert "more output file(s) not listed here" in shaped.text
        assert len(shaped.structured["output_files"]) == 200  # every ref is in the structured view


MIN = 2_000


def test_unsaved_files_print_no_ref() -> None:
    result = _result(output_files=[_file("out/big.bin", None, size=10**6, ref="workspace://out/big.bin")])
    shaped = shape_run(result, ResultBudget(), "mcp", failed=False)
    assert (
        "workspace://" not in shaped.text and "not kept: not saved as an artifact (outputs.save is false" in shaped.text
    )
    assert shaped.blocks[1:] == []  # no link to something nobody can read
    # A run result's unsaved file has no ref at all (POST /v1/runs without outputs.save): a small one is
    # still shown, in the text (an MCP embedded resource would need a URI), and said to be not kept.
    small = _result(
        output_files=[_file("out/s.txt", "hello\n", size=6, ref=None), _file("out/b.bin", None, size=10**6, ref=None)]
    )
    for surface in ("mcp", "text"):
        shown = shape_run(small, ResultBudget(), surface, failed=False)  # type: ignore[arg-type]
        assert shown.text.splitlines()[1:] == [
            "file out/s.txt (text/plain, 6 bytes, not kept):",
            "hello",
            "file out/b.bin (text/plain, 1000000 bytes): not kept: not saved as an artifact (outputs.save is false, "
            "or see the warnings)",
        ]
        assert shown.blocks[1:] == []


def test_images_share_their_allowance() -> None:
    files = [_file(f"out/{i}.png", PNG, size=68, mime="image/png", encoding="base64") for i in range(3)]
    shaped = shape_run(_result(output_files=files), ResultBudget(image_bytes=150), "mcp", failed=False)
    assert [type(b) for b in shaped.blocks[1:]] == [Image, Image, Embedded]  # the third: a small blob


def test_overrides_and_bounds() -> None:
    budget = BudgetOverride(max_chars=5_000).apply(ResultBudget())
    assert budget == ResultBudget(max_chars=5_000)
    with pytest.raises(ValidationError):
        BudgetOverride(max_chars=10)
    with pytest.raises(ValidationError):
        BudgetOverride.model_validate({"max_char": 5_000})


def test_marker_names_the_ref() -> None:
    assert marker("stdout", 5, 10, "artifact://x@1") == (
        "[... 5 of 10 characters of stdout cut to fit the tool-result budget; the full stdout: artifact://x@1]"
    )


def test_messages_carry_the_blocks() -> None:
    result = run_result(_big(), ResultBudget(), "anthropic")
    message = result.message("anthropic", "tu")
    assert message["content"][0] == {"type": "text", "text": result.content}
    assert message["content"][1]["type"] == "image" and message["content"][1]["source"]["data"] == PNG
    mcp = run_result(_big(), ResultBudget(), "mcp").message("mcp", "1")["content"]
    assert [b["type"] for b in mcp] == ["text", "resource_link", "resource", "image"]
    plain = run_result(_result(stdout="ok\n"))
    assert plain.message("anthropic", "t")["content"] == plain.content  # no images: the text as it was
    assert isinstance(plain, ToolResult) and plain.blocks == []


def test_tool_runs_keep_their_outputs() -> None:
    base = {"skill": "s", "command": "true"}
    kept = keep_outputs(RunRequest.model_validate({**base, "outputs": {"globs": ["out/**"]}}), "mcp")
    assert kept.outputs is not None and kept.outputs.save and kept.outputs.name_template == "runs/{run_id}/{safe_path}"
    assert kept.outputs.inline_binary
    text = keep_outputs(RunRequest.model_validate({**base, "outputs": {"globs": ["out/**"]}}), "text")
    assert text.outputs is not None and text.outputs.save and not text.outputs.inline_binary
    own = keep_outputs(
        RunRequest.model_validate({**base, "outputs": {"globs": ["o"], "save": True, "name_template": "mine/{name}"}}),
        "mcp",
    )
    assert own.outputs is not None and own.outputs.name_template == "mine/{name}"
    refused = keep_outputs(RunRequest.model_validate({**base, "outputs": {"globs": ["o"], "save": False}}), "text")
    assert refused.outputs is not None and not refused.outputs.save
    legacy = keep_outputs(RunRequest.model_validate({**base, "output_files": ["out/*"]}), "text")
    assert legacy.outputs is not None and legacy.outputs.save
    assert keep_outputs(RunRequest.model_validate(base), "mcp").outputs is None


def test_a_stream_that_cannot_be_kept_is_still_answered() -> None:
    """An error path: the store refuses the save; the result still answers, its marker says so."""
    from skill_executor.errors import NotFound, TooLarge
    from skill_executor.tools import kept_result

    class Refusing:
        def info(self, name: str, version: int | None = None, **kwargs: Any) -> Any:
            raise NotFound(f"no artifact {name!r}", code="artifact_not_found")

        def put(self, name: str, data: bytes, **kwargs: Any) -> Any:
            raise TooLarge("no room", code="artifact_too_large")

    result = _result(stdout="q" * 20_000)
    kept = kept_result(result, ResultBudget(max_chars=MIN), "text", artifacts=Refusing(), tenant="t")  # type: ignore[arg-type]
    assert not kept.is_error and "the full stdout was not kept]" in kept.content
    assert kept.data["artifact_files"] == []


def test_a_result_shaped_again_names_the_stream_kept_before(library: Executor) -> None:
    """An MCP task's result is shaped on every tasks/get: the cut stream is saved once, and each
    shaping names that version (not a new one per poll)."""
    from skill_executor.tools import kept_result

    result = _result(stdout="q" * 20_000)
    first, second = (
        kept_result(result, ResultBudget(max_chars=MIN), "mcp", artifacts=library.artifacts, tenant="t")
        for _ in range(2)
    )
    assert first.content == second.content and first.data == second.data
    assert [a["ref"] for a in first.data["artifact_files"]] == ["artifact://runs/r1/stdout@1"]
    assert [i.ref for i in library.artifacts.names(tenant="t")] == ["artifact://runs/r1/stdout@1"]
    other = kept_result(  # another run's stream under that name is never taken for this one's
        _result(stdout="z" * 20_000), ResultBudget(max_chars=MIN), "mcp", artifacts=library.artifacts, tenant="t"
    )
    assert "the full stdout: artifact://runs/r1/stdout@2]" in other.content


@pytest.fixture
def library(tmp_path: Path) -> Iterator[Executor]:
    """The library on the local runtime (no engine: the shaping is the same on every runtime)."""
    made = Executor.from_settings(make_settings(tmp_path, "local"))
    try:
        yield made
    finally:
        made.close()


def test_the_library_tool_helper_keeps_what_it_refers_to(library: Executor) -> None:
    """The Python tool helper (ToolExecutor over the library's runner): the same budget, and
    every ref it prints reads back and stages as the next run's input."""
    from skill_executor.tools import ToolExecutor

    executor = library
    tools = ToolExecutor(executor.repository, executor.runner.run, artifacts=executor.artifacts)
    command = "seq 1 100000; seq 1 20000 > out/n.txt; echo hi > out/small.txt; echo spaced > 'out/My Report.txt'"
    ran = tools.call(
        "skill_run",
        {"skill": "math-tools", "command": command, "outputs": {"globs": ["out/*"]}},
        budget=ResultBudget(max_chars=MIN),
    )
    assert not ran.is_error and len(ran.content) <= MIN, ran.content
    assert ran.content.splitlines()[2] == "1" and "\n100000\n" in ran.content  # head and tail
    stdout_ref = ran.data["artifact_files"][-1]["ref"]
    assert f"the full stdout: {stdout_ref}]" in ran.content
    refs = {f["name"]: f["ref"] for f in ran.data["output_files"]}
    assert f"full content at {refs['out/n.txt']}" in ran.content and "file out/small.txt" in ran.content
    assert "hi" in ran.content.split("file out/small.txt")[1]  # small: inline, once
    _, data = executor.artifacts.read(*_name_version(stdout_ref))
    assert data.decode() == "".join(f"{i}\n" for i in range(1, 100_001))
    again = tools.call(
        "skill_run",
        {
            "skill": "math-tools",
            "command": "wc -l < inputs/n.txt",
            "inputs": [{"from": refs["out/n.txt"], "to": "inputs/n.txt"}],
        },
    )
    assert again.data["stdout"] == "20000\n"
    # A name an artifact cannot hold is kept under its safe form.
    assert refs["out/My Report.txt"].startswith(f"artifact://runs/{ran.data['run_id']}/out/My_Report.txt@")
    _, spaced = executor.artifacts.read(*_name_version(refs["out/My Report.txt"]))
    assert spaced == b"spaced\n"


def test_safe_path() -> None:
    from skill_executor.artifacts.names import validate_name
    from skill_executor.outputs.naming import NameTemplate, safe_path

    assert safe_path("out/My Report (1).pdf") == "out/My_Report__1_.pdf"
    assert safe_path("out/.hidden/-x/ü.txt") == "out/_.hidden/_-x/_.txt"
    for path in ("out/a b", "out/.env", "work/../x", "out/\u00e9t\u00e9", "out/+plus"):
        validate_name(safe_path(path))
    rendered = NameTemplate.parse("runs/{run_id}/{safe_path}").render(
        path="out/a b.txt", name="a b.txt", stem="a b", ext=".txt", run_id="r1", session="", prefix=""
    )
    assert rendered == "runs/r1/out/a_b.txt"


def _name_version(ref: str) -> tuple[str, int]:
    name, version = ref.removeprefix("artifact://").rsplit("@", 1)
    return name, int(version)


def test_other_tools_fit_the_budget_too(tmp_path: Path) -> None:
    from skill_executor.registry import SkillRepository
    from skill_executor.tools import ToolExecutor

    from ..helpers import make_skill

    skill = make_skill(tmp_path, "big-docs", "name: big-docs\ndescription: Long docs.\n")
    (skill / "references").mkdir()
    (skill / "references" / "long.md").write_text("".join(f"paragraph {i}\n" for i in range(10_000)))
    tools = ToolExecutor(SkillRepository([tmp_path]))
    read = tools.call(
        "skill_select_docs", {"skill": "big-docs", "include_all_docs": True}, budget=ResultBudget(max_chars=MIN)
    )
    assert len(read.content) <= MIN and "paragraph 0\n" in read.content and read.content.endswith("paragraph 9999\n")
    assert "characters of this result cut to fit the tool-result budget; ask for fewer docs at a time]" in read.content


def test_crowded_streams_still_name_their_refs() -> None:
    files = [_file(f"out/{i:04d}.txt", "c" * 100, size=100) for i in range(300)]
    result = _result(stdout="o" * 50_000, stderr="e" * 50_000, output_files=files)
    refs = {"stdout": "artifact://runs/r1/stdout@1", "stderr": "artifact://runs/r1/stderr@1"}
    shaped = shape_run(result, ResultBudget(max_chars=MIN), "text", failed=False, stream_refs=refs)
    assert shaped.chars() <= MIN and shaped.cut == ["stdout", "stderr"]
    assert "the full stdout: artifact://runs/r1/stdout@1]" in shaped.text
    assert "the full stderr: artifact://runs/r1/stderr@1]" in shaped.text
