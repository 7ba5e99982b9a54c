"""Parsing and validation rules of the skills layer, one fixture per rule."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from skill_executor.skills import check, load_skill, yamlread
from skill_executor.skills.loader import SkillLoadError, split_tools
from skill_executor.skills.parser import MAX_FRONTMATTER_BYTES, MAX_SKILL_FILE_BYTES
from skill_executor.skills.rules import derive_id

from ..helpers import make_skill

VALID = "name: demo\ndescription: A demo skill."


def codes(diags) -> list[str]:
    return [d.code for d in diags]


def test_valid_skill_has_no_findings(tmp_path: Path) -> None:
    d = make_skill(tmp_path, "demo", VALID + "\nlicense: MIT\ncompatibility: python3\nmetadata:\n  a: b")
    verdict = check(d, strict=True)
    assert verdict.valid and verdict.errors == [] and verdict.warnings == []
    skill = verdict.skill
    assert skill is not None
    assert (skill.name, skill.id, skill.description, skill.license) == ("demo", "demo", "A demo skill.", "MIT")
    assert skill.metadata == {"a": "b"}
    assert skill.body == "# Body"


def test_bom_is_stripped_with_a_note(tmp_path: Path) -> None:
    d = make_skill(tmp_path, "demo", "", raw=b"\xef\xbb\xbf---\n" + VALID.encode() + b"\n---\nbody\n")
    verdict = check(d, strict=True)
    assert verdict.valid
    assert "bom" in codes(verdict.warnings)
    assert verdict.skill and verdict.skill.name == "demo"


def test_crlf_and_cr_are_normalised(tmp_path: Path) -> None:
    raw = b"---\r\nname: demo\r\ndescription: |\r\n  line one\r\n  line two\r\n---\r\nbody\r\nmore\r\n"
    skill = load_skill(make_skill(tmp_path, "demo", "", raw=raw))
    assert skill.description == "line one\nline two"
    assert skill.body == "body\nmore"
    assert "\r" not in skill.raw
    skill_cr = load_skill(make_skill(tmp_path / "cr", "demo", "", raw=raw.replace(b"\r\n", b"\r")))
    assert skill_cr.description == "line one\nline two"


def test_triple_dash_inside_a_value_does_not_cut_frontmatter(tmp_path: Path) -> None:
    d = make_skill(tmp_path, "demo", "name: demo\ndescription: before --- after\nlicense: MIT")
    skill = load_skill(d)
    assert skill.description == "before --- after"
    assert skill.license == "MIT"
    block = make_skill(tmp_path / "b", "demo", "name: demo\ndescription: |\n  first\n  ---x\n  last")
    assert load_skill(block).description == "first\n---x\nlast"


def test_delimiter_with_trailing_spaces(tmp_path: Path) -> None:
    d = make_skill(tmp_path, "demo", "", raw=b"---  \nname: demo\ndescription: d\n--- \t\nbody")
    assert load_skill(d).body == "body"


def test_blank_lines_before_frontmatter_warn(tmp_path: Path) -> None:
    d = make_skill(tmp_path, "demo", "", raw=b"\n\n---\n" + VALID.encode() + b"\n---\n")
    verdict = check(d, strict=True)
    assert verdict.valid and "leading-blank-lines" in codes(verdict.warnings)


@pytest.mark.parametrize(
    "raw, code",
    [
        (b"# no frontmatter\n", "frontmatter-missing"),
        (b"---\nname: demo\ndescription: d\n", "frontmatter-unclosed"),
        (b"---\n- a\n- b\n---\n", "frontmatter-not-mapping"),
        (b"---\n---\nbody", "frontmatter-not-mapping"),
        (b"---\nname: demo\n description: misplaced\n---\n", "yaml-invalid"),
        (b"---\nname: demo\ndescription: d\n\tlicense: tab-indented\n---\n", "yaml-invalid"),
        (b"---\nname: demo\ndescription: caf\xe9\n---\n", "encoding"),
        (b"---\nname: demo\n---\n", "description-missing"),
        (b"---\nname: demo\ndescription: '   '\n---\n", "description-empty"),
        (b"---\nname: demo\ndescription:\n---\n", "description-empty"),
        (b"---\nname: demo\ndescription: [a, b]\n---\n", "description-type"),
    ],
)
def test_rejections(tmp_path: Path, raw: bytes, code: str) -> None:
    d = make_skill(tmp_path, "demo", "", raw=raw)
    with pytest.raises(SkillLoadError) as info:
        load_skill(d)
    assert info.value.diagnostics[0].code == code or code in codes(info.value.diagnostics)
    verdict = check(d)
    assert not verdict.valid and code in codes(verdict.errors)


def test_non_utf8_message_is_clear(tmp_path: Path) -> None:
    d = make_skill(tmp_path, "demo", "", raw=b"---\nname: demo\ndescription: \xff\n---\n")
    verdict = check(d)
    assert "not valid UTF-8" in verdict.errors[0].message and "0xff" in verdict.errors[0].message


def test_block_scalar_descriptions_are_stripped(tmp_path: Path) -> None:
    literal = load_skill(make_skill(tmp_path / "a", "demo", "name: demo\ndescription: |\n  Does things.\n  Well.\n"))
    folded = load_skill(make_skill(tmp_path / "b", "demo", "name: demo\ndescription: >\n  Does things.\n  Well.\n"))
    keep = load_skill(make_skill(tmp_path / "c", "demo", "name: demo\ndescription: |+\n  Kept.\n\n\n"))
    assert literal.description == "Does things.\nWell."
    assert folded.description == "Does things. Well."
    assert keep.description == "Kept."


def test_length_is_measured_in_code_points(tmp_path: Path) -> None:
    desc = "é" * 1024  # 2048 bytes, 1024 code points: exactly at the limit
    assert check(make_skill(tmp_path / "a", "demo", f"name: demo\ndescription: {desc}"), strict=True).valid
    long = check(make_skill(tmp_path / "b", "demo", f"name: demo\ndescription: {desc}é"), strict=True)
    assert "description-too-long" in codes(long.errors)
    tolerant = check(tmp_path / "b" / "demo")
    assert tolerant.valid and "description-too-long" in codes(tolerant.warnings)


def test_typed_looking_scalars_stay_strings(tmp_path: Path) -> None:
    d = make_skill(
        tmp_path,
        "yes",
        "name: yes\ndescription: 1.0\nlicense: 2024\ncompatibility: null\n"
        "metadata:\n  version: 1.0\n  enabled: true\n  date: 2024-01-01\n  octal: 0755\n  empty:",
    )
    skill = load_skill(d)
    assert skill.name == "yes" and skill.description == "1.0" and skill.license == "2024"
    assert skill.compatibility == "null"
    assert skill.metadata == {"version": "1.0", "enabled": "true", "date": "2024-01-01", "octal": "0755", "empty": ""}
    assert check(d, strict=True).valid


def test_explicit_tags_become_strings(tmp_path: Path) -> None:
    skill = load_skill(make_skill(tmp_path, "demo", "name: demo\ndescription: !!int 42\nmetadata:\n  a: !!float 1"))
    assert skill.description == "42" and skill.metadata == {"a": "1.0"}


def test_flow_and_block_lists_and_anchors_are_valid_yaml(tmp_path: Path) -> None:
    d = make_skill(
        tmp_path,
        "demo",
        "name: demo\ndescription: &d Shared text\nallowed-tools: [Read, Write]\n"
        "x-tags:\n  - one\n  - two\nx-copy: *d\nx-base: &base {k: v}\nx-merged:\n  <<: *base\n  z: w",
    )
    skill = load_skill(d)
    assert skill.allowed_tools == ["Read", "Write"]
    assert skill.extras["x-tags"] == ["one", "two"]
    assert skill.extras["x-copy"] == "Shared text"
    assert skill.extras["x-merged"] == {"k": "v", "z": "w"}


@pytest.fixture(params=["libyaml", "python"])
def yaml_parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each YAML test runs with libyaml and with PyYAML's pure-Python parser: same verdicts."""
    if request.param not in yamlread._LOADERS:  # pragma: no cover - the lock file's PyYAML has libyaml
        pytest.fail(f"PyYAML has no {request.param} parser here")
    monkeypatch.setattr(yamlread, "YAML_PARSER", request.param)
    return str(request.param)


def _merge_bomb(levels: int, copies: int) -> list[str]:
    """Each level merges the previous one ``copies`` times: copies**levels keys to flatten."""
    lines = ["m0: &m0 {x: 1, y: 2}"]
    for i in range(1, levels):
        lines.append(f"m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * copies)}]}}")
    return lines


def _laughs() -> list[str]:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 12):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    return lines


@pytest.mark.parametrize(
    "yaml_lines, bound",
    [
        # 9**12 list items: composing shares them, but JSON of the skill never ends.
        (_laughs(), "more than 10000 YAML nodes"),
        # PyYAML flattens merges eagerly: 8**9 keys, minutes of CPU for 483 bytes.
        (_merge_bomb(9, 8), "more than 10000 YAML nodes"),
        (["k: " + "[" * 20000 + "]" * 20000], "nested more than 64 deep"),  # RecursionError before
        (["k: " + "{a: " * 5000 + "}" * 5000], "nested more than 64 deep"),
        (["k:", *(" " * i + "- " for i in range(2, 200, 2))], "nested more than 64 deep"),
        (["? " * 2000 + "a"], "nested more than 64 deep"),
        (["k: [" + ",".join("a" * 30000) + "]"], "more than 10000 YAML nodes"),
        (["a: &a x", "b: [" + ", ".join(["*a"] * 1001) + "]"], "more than 1000 alias references"),
        (["a: &a " + "x" * 30000, "b: [" + ", ".join(["*a"] * 9) + "]"], "more than 262144 characters"),
        (["a: &a [*a]"], "the alias *a refers to a node that contains it"),
        (["a: &a {<<: *a}"], "the alias *a refers to a node that contains it"),
    ],
    ids=[
        "laughs",
        "merge-keys",
        "deep-flow",
        "deep-flow-map",
        "deep-block",
        "deep-keys",
        "dense",
        "aliases",
        "text",
        "cycle",
        "merge-cycle",
    ],
)
def test_yaml_bombs_are_refused_fast(tmp_path: Path, yaml_parser: str, yaml_lines: list[str], bound: str) -> None:
    d = make_skill(tmp_path, "demo", "\n".join(["name: demo", "description: d", *yaml_lines]))
    started = time.perf_counter()
    with pytest.raises(SkillLoadError) as info:
        load_skill(d)
    assert time.perf_counter() - started < 1.0
    fatal = info.value.diagnostics[0]
    assert fatal.code == "yaml-invalid" and fatal.severity == "fatal"
    assert bound in fatal.message and "the frontmatter is refused" in fatal.message
    verdict = check(d)
    assert not verdict.valid and codes(verdict.errors) == ["yaml-invalid"]


@pytest.mark.parametrize(
    "opener, depth",
    [(o, d) for o in ("[", "{a: ") for d in (65, 500, 999, 1001, 5000)] + [("[", 20000)],
)
def test_deep_nesting_is_one_verdict_whichever_stops_it(
    tmp_path: Path, yaml_parser: str, depth: int, opener: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libyaml (PyYAML 6.0.4+) stops deep flow collections itself while scanning ahead;
    the composer stops them at 64.  Whichever comes first, the refusal is the same, and
    never a candidate for repair (a repair once read a 20 000-deep bomb as text)."""
    closer = "]" if opener == "[" else "}"
    for description in ("d", "Use when: x"):  # the second needs a repair: the bomb must not get one
        d = make_skill(
            tmp_path / f"{len(description)}",
            "demo",
            f"name: demo\ndescription: {description}\nk: " + opener * depth + closer * depth,
        )
        with pytest.raises(SkillLoadError) as info:
            load_skill(d)
        fatal = info.value.diagnostics[0]
        assert fatal.code == "yaml-invalid"
        assert "collections nested more than 64 deep" in fatal.message, fatal.message
        assert not any(n.code == "yaml-repaired" for n in info.value.diagnostics)


def test_libyaml_nesting_limit_is_refused_as_the_depth_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """libyaml's own limit, set below the composer's, gives the composer's verdict."""
    from yaml import _yaml  # type: ignore[attr-defined]

    if getattr(_yaml, "_get_max_nest_level", lambda: -1)() < 0:
        pytest.fail("the locked PyYAML/libyaml exposes no nesting limit; update this test with the lock")
    monkeypatch.setattr(yamlread, "YAML_PARSER", "libyaml")
    before = _yaml._get_max_nest_level()
    _yaml._set_max_nest_level(10)
    try:
        d = make_skill(tmp_path, "demo", "name: demo\ndescription: d\nk: " + "[" * 20 + "]" * 20)
        with pytest.raises(SkillLoadError) as info:
            load_skill(d)
    finally:
        _yaml._set_max_nest_level(before)
    assert "collections nested more than 64 deep (line 4)" in info.value.diagnostics[0].message


def test_repair_path_is_bounded_too(tmp_path: Path) -> None:
    """A value that needs repair does not buy a second, unbounded parse."""
    bomb = make_skill(tmp_path / "a", "demo", "\n".join(["name: demo", "description: Use when: x", *_merge_bomb(9, 8)]))
    started = time.perf_counter()
    with pytest.raises(SkillLoadError) as info:
        load_skill(bomb)
    assert "more than 10000 YAML nodes" in info.value.diagnostics[0].message
    # A 60 000-blank line took the repair's line pattern seconds (quadratic backtracking).
    blanks = load_skill(make_skill(tmp_path / "b", "demo", "name: demo\ndescription: Use when: x" + " " * 60000 + "y"))
    assert blanks.description == "Use when: x" + " " * 60000 + "y"
    # Thousands of lines to try alone: the repair gives up, the first error is reported.
    many = make_skill(tmp_path / "c", "demo", "name: demo\ndescription: Use when: x\n" + "k: @x\n" * 10000)
    with pytest.raises(SkillLoadError) as info:
        load_skill(many)
    assert info.value.diagnostics[0].code == "yaml-invalid"
    # Thousands of unindented continuation lines are folded in linear time.
    folded = load_skill(make_skill(tmp_path / "d", "demo", "name: demo\ndescription: Use when: x\n" + "y\n" * 30000))
    assert folded.description == "Use when: x" + " y" * 30000
    assert time.perf_counter() - started < 2.0


def test_frontmatter_size_is_capped(tmp_path: Path) -> None:
    prefix = "name: demo\ndescription: d\nx-pad: "
    at_limit = prefix + "p" * (MAX_FRONTMATTER_BYTES - len(prefix) - 2) + "é"
    assert len(at_limit.encode()) == MAX_FRONTMATTER_BYTES
    assert load_skill(make_skill(tmp_path / "a", "demo", at_limit)).description == "d"
    big = make_skill(tmp_path / "b", "demo", at_limit[:-2] + "éé")  # as many characters, one byte more
    with pytest.raises(SkillLoadError) as info:
        load_skill(big)
    fatal = info.value.diagnostics[0]
    assert fatal.code == "frontmatter-too-large"
    assert f"is {MAX_FRONTMATTER_BYTES + 1} bytes; the limit is {MAX_FRONTMATTER_BYTES}" in fatal.message
    # The body is not frontmatter: a long body is fine.
    assert load_skill(make_skill(tmp_path / "c", "demo", VALID, body="x" * 1_000_000)).body == "x" * 1_000_000


def test_oversized_skill_file_is_not_read_whole(tmp_path: Path) -> None:
    d = make_skill(tmp_path, "demo", VALID, body="x" * (MAX_SKILL_FILE_BYTES + 10))
    with pytest.raises(SkillLoadError) as info:
        load_skill(d)
    assert info.value.diagnostics[0].code == "file-too-large"


@pytest.mark.parametrize("value", ["!!int abc", "!!timestamp 2024-13-45", "!!int 0b", "!!float x"])
def test_unreadable_tagged_values_are_yaml_invalid(tmp_path: Path, value: str) -> None:
    """They raised ValueError before: a 500, and a repository scan that stopped at them."""
    d = make_skill(tmp_path, "demo", f"name: demo\ndescription: {value}")
    with pytest.raises(SkillLoadError) as info:
        load_skill(d)
    assert info.value.diagnostics[0].code == "yaml-invalid"
    assert "a tagged value cannot be read" in info.value.diagnostics[0].message


def test_ordinary_anchors_and_merge_keys_still_work(tmp_path: Path) -> None:
    fm = "\n".join(
        [
            "name: demo",
            "description: &d Shared",
            "x-defaults: &base {timeout: 30, retries: 2}",
            "x-extra: &extra {verbose: true}",
            "x-job:",
            "  <<: [*base, *extra]",
            "  retries: 5",
            "x-again: *d",
            "x-merge-of-merge:",
            "  <<: *base",
            "x-list: &l [a, b]",
            "x-lists: [*l, *l, *l]",
            "x-deep: " + "[" * 60 + "]" * 60,
            *_merge_bomb(3, 8),
        ]
    )
    skill = load_skill(make_skill(tmp_path, "demo", fm))
    assert skill.extras["x-job"] == {"timeout": "30", "retries": "5", "verbose": "true"}
    assert skill.extras["x-again"] == "Shared" and skill.extras["x-merge-of-merge"] == {"timeout": "30", "retries": "2"}
    assert skill.extras["x-lists"] == [["a", "b"]] * 3
    assert skill.extras["m2"] == {"x": "1", "y": "2"}


def test_duplicate_keys(tmp_path: Path) -> None:
    d = make_skill(tmp_path, "demo", "name: demo\ndescription: first\ndescription: second")
    strict = check(d, strict=True)
    assert not strict.valid and "duplicate-key" in codes(strict.errors)
    assert "line 4" in next(e.message for e in strict.errors if e.code == "duplicate-key")
    tolerant = check(d)
    assert tolerant.valid and "duplicate-key" in codes(tolerant.warnings)
    assert tolerant.skill and tolerant.skill.description == "second"


def test_unquoted_colon_is_repaired_once_with_a_warning(tmp_path: Path) -> None:
    d = make_skill(
        tmp_path, "demo", "name: demo\ndescription: Use when: the user asks  # trailing comment\nlicense: MIT"
    )
    tolerant = check(d)
    assert tolerant.valid and "yaml-repaired" in codes(tolerant.warnings)
    assert tolerant.skill and tolerant.skill.description == "Use when: the user asks"
    assert tolerant.skill.license == "MIT"
    assert "yaml-repaired" in codes(check(d, strict=True).errors)
    quotes = load_skill(make_skill(tmp_path / "q", "demo", 'name: demo\ndescription: Say "hi": then \\ go'))
    assert quotes.description == 'Say "hi": then \\ go'
    for value in [
        "@mention the bot",
        "`code` helper",
        "%complete tasks",
        "[Beta] Does X",
        "{{name}} helper",
        '"Fast" helper for Y',
        "'Fast' helper: for Y",
        "[unclosed",
    ]:
        odd = check(make_skill(tmp_path / "r" / str(abs(hash(value))), "demo", f"name: demo\ndescription: {value}"))
        assert odd.valid and odd.skill and odd.skill.description == value
        assert "yaml-repaired" in codes(odd.warnings)


def test_unindented_continuation_lines_are_folded(tmp_path: Path) -> None:
    d = make_skill(
        tmp_path, "demo", "name: demo\ndescription: This skill does X.\nUse it when Y happens.\nlicense: MIT"
    )
    tolerant = check(d)
    assert tolerant.valid and tolerant.skill is not None
    assert tolerant.skill.description == "This skill does X. Use it when Y happens." and tolerant.skill.license == "MIT"
    assert "yaml-repaired" in codes(tolerant.warnings) and "yaml-repaired" in codes(check(d, strict=True).errors)


def test_valid_yaml_is_never_repaired(tmp_path: Path) -> None:
    fm = "name: demo\ndescription: |\n  Line: one\n  [two]\ntags: [a, b]\nx-quoted: 'it''s: fine'"
    skill = load_skill(make_skill(tmp_path, "demo", fm))
    assert skill.description == "Line: one\n[two]" and skill.extras == {"tags": ["a", "b"], "x-quoted": "it's: fine"}
    assert "yaml-repaired" not in codes(skill.diagnostics)


def test_unknown_keys_are_kept_as_extras(tmp_path: Path) -> None:
    d = make_skill(tmp_path, "demo", VALID + "\nversion: 2\nauthor: me")
    strict = check(d, strict=True)
    assert codes(strict.errors) == ["unknown-field", "unknown-field"]
    assert "'author'" in strict.errors[0].message and "'version'" in strict.errors[1].message
    tolerant = check(d)
    assert tolerant.valid and tolerant.skill and tolerant.skill.extras == {"version": "2", "author": "me"}


def test_disable_model_invocation_hides(tmp_path: Path) -> None:
    skill = load_skill(make_skill(tmp_path, "demo", VALID + "\ndisable-model-invocation: true"))
    assert skill.hidden
    assert not load_skill(make_skill(tmp_path / "x", "demo", VALID)).hidden


def test_name_dir_mismatch_nfkc(tmp_path: Path) -> None:
    mismatch = check(make_skill(tmp_path, "other", VALID), strict=True)
    assert codes(mismatch.errors) == ["name-dir-mismatch"]
    tolerant = check(tmp_path / "other")
    assert tolerant.valid and tolerant.skill and tolerant.skill.id == "demo"
    # A fullwidth directory name equals the ASCII name under NFKC.
    same = check(make_skill(tmp_path, "ｄｅｍｏ", VALID), strict=True)
    assert "name-dir-mismatch" not in codes(same.errors)


@pytest.mark.parametrize(
    "name, ok",
    [
        ("a", True),
        ("pdf-tools2", True),
        ("a" * 64, True),
        ("a" * 65, False),
        ("PDF-Tools", False),
        ("-lead", False),
        ("trail-", False),
        ("double--hyphen", False),
        ("under_score", False),
        ("dot.name", False),
        ("space name", False),
    ],
)
def test_name_format(tmp_path: Path, name: str, ok: bool) -> None:
    d = make_skill(tmp_path, name if "/" not in name else "x", f"name: {name}\ndescription: d")
    verdict = check(d, strict=True)
    assert verdict.valid is ok, verdict.errors
    assert check(d).valid


def test_bad_name_gets_a_safe_id_and_keeps_display_name(tmp_path: Path) -> None:
    skill = load_skill(make_skill(tmp_path, "My Skill", "name: My_Cool.Skill  v2\ndescription: d"))
    assert skill.name == "My_Cool.Skill  v2"
    assert skill.id == "my-cool-skill-v2"
    assert derive_id("--A  b__c..d--") == "a-b-c-d"
    assert derive_id("日本") == ""


def test_missing_name_falls_back_to_directory(tmp_path: Path) -> None:
    d = make_skill(tmp_path, "fallback-dir", "description: d")
    strict = check(d, strict=True)
    assert "name-missing" in codes(strict.errors)
    tolerant = check(d)
    assert (
        tolerant.valid
        and tolerant.skill
        and (tolerant.skill.name, tolerant.skill.id) == ("fallback-dir", "fallback-dir")
    )


def test_lowercase_skill_md(tmp_path: Path) -> None:
    d = make_skill(tmp_path, "demo", VALID, filename="skill.md")
    strict = check(d, strict=True)
    assert codes(strict.errors) == ["file-name"]
    assert check(d).valid


@pytest.mark.parametrize(
    "extra, code",
    [
        ("license: [MIT]", "license-type"),
        ("compatibility: ''", "compatibility-length"),
        ("compatibility: " + "x" * 501, "compatibility-length"),
        ("compatibility: {a: b}", "compatibility-type"),
        ("metadata: just text", "metadata-type"),
        ("metadata:\n  nested: {a: b}", "metadata-value"),
        ("allowed-tools: [Read, Write]", "allowed-tools-list"),
        ("allowed-tools: {a: b}", "allowed-tools-type"),
    ],
)
def test_optional_field_rules(tmp_path: Path, extra: str, code: str) -> None:
    d = make_skill(tmp_path, "demo", VALID + "\n" + extra)
    strict = check(d, strict=True)
    assert codes(strict.errors) == [code]
    tolerant = check(d)
    assert tolerant.valid and code in codes(tolerant.warnings)


def test_every_violation_is_reported(tmp_path: Path) -> None:
    d = make_skill(
        tmp_path,
        "dir",
        "name: Bad_Name\ndescription: " + "x" * 1100 + "\nfoo: 1\nlicense: [a]\ncompatibility: ''",
        filename="skill.md",
    )
    found = set(codes(check(d, strict=True).errors))
    assert {
        "file-name",
        "unknown-field",
        "name-format",
        "name-dir-mismatch",
        "description-too-long",
        "license-type",
        "compatibility-length",
    } <= found


def test_allowed_tools_normalisation(tmp_path: Path) -> None:
    spaced = load_skill(make_skill(tmp_path / "a", "demo", VALID + '\nallowed-tools: "Bash(git diff *) Read  Write"'))
    assert spaced.allowed_tools == ["Bash(git diff *)", "Read", "Write"]
    comma = check(make_skill(tmp_path / "b", "demo", VALID + '\nallowed-tools: "Read, Bash(a, b), Write"'), strict=True)
    assert comma.valid and "allowed-tools-commas" in codes(comma.warnings)
    assert comma.skill and comma.skill.allowed_tools == ["Read", "Bash(a, b)", "Write"]
    listed = load_skill(make_skill(tmp_path / "c", "demo", VALID + "\nallowed-tools:\n  - Bash(git log *)\n  - Read"))
    assert listed.allowed_tools == ["Bash(git log *)", "Read"]
    assert split_tools("A,B C")[0] == ["A", "B", "C"]


def test_body_is_trimmed_and_raw_kept(tmp_path: Path) -> None:
    raw = b"---\nname: demo\ndescription: d\n---\n\n\n  # Title\n\ntext\n\n\n"
    skill = load_skill(make_skill(tmp_path, "demo", "", raw=raw))
    assert skill.body == "# Title\n\ntext"
    assert skill.raw == raw.decode()


def test_skill_md_path_is_accepted_directly(tmp_path: Path) -> None:
    d = make_skill(tmp_path, "demo", VALID)
    assert check(d / "SKILL.md", strict=True).valid
    missing = check(tmp_path / "nope")
    assert not missing.valid and codes(missing.errors) == ["not-found"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert codes(check(empty).errors) == ["skill-file-missing"]


def test_key_spelling_variants_are_read_as_spec_keys(tmp_path: Path) -> None:
    d = make_skill(tmp_path, "demo", "Name: demo\nDescription: Works.\nallowed_tools: Read Write\nLicense: MIT")
    strict = check(d, strict=True)
    assert codes(strict.errors) == ["key-spelling"] * 4
    tolerant = check(d)
    assert tolerant.valid and tolerant.skill is not None
    skill = tolerant.skill
    assert (skill.name, skill.description, skill.allowed_tools, skill.license) == (
        "demo",
        "Works.",
        ["Read", "Write"],
        "MIT",
    )
    assert skill.extras == {}
    both = load_skill(make_skill(tmp_path / "b", "demo", "name: demo\ndescription: exact\nDescription: variant"))
    assert both.description == "exact" and both.extras == {"Description": "variant"}


def test_other_casings_of_the_file_name(tmp_path: Path) -> None:
    d = make_skill(tmp_path, "demo", VALID, filename="Skill.md")
    strict = check(d, strict=True)
    assert codes(strict.errors) == ["file-name"] and "Skill.md" in strict.errors[0].message
    assert check(d).valid
