"""Preflight (``skills doctor``): the static scan of a skill's needs, and the probe on the real engine."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from skill_executor.access import LOCAL
from skill_executor.core import Executor
from skill_executor.doctor import PROBE_FAILED, DoctorReport, diagnose, parse_answer, render_table
from skill_executor.doctor import probe as doctor_probe
from skill_executor.doctor.probe import run_probe
from skill_executor.errors import NotFound
from skill_executor.skills import load_skill
from skill_executor.preflight import ImageNeeds, fenced_blocks, looks_like_shell, scan, scan_texts, shell_commands
from skill_executor.preflight.model import Use

from skill_executor_client import Client

from ..api_server import Server
from ..conftest import REPO, SKILLS, make_settings
from ..helpers import make_skill


def commands(needs: ImageNeeds) -> dict[str, list[str]]:
    return {name: [str(u) for u in need.uses] for name, need in needs.commands.items()}


# -- the scan (pure) ---------------------------------------------------------------------------


def test_commands_from_doc_blocks() -> None:
    doc = "\n".join(
        [
            "# Use",  # 1
            "```bash",  # 2
            "$ FOO=1 sudo -E pandoc in.md -o out.docx",  # 3
            "cd work && soffice --headless --convert-to pdf x | tee log; qpdf --check x.pdf",  # 4
            "python3 scripts/run.py \\",  # 5
            "   --flag",  # 6
            "for f in *.png; do tesseract $f -; done",  # 7
            "x=$(jq -r .a data.json) && echo $((x + 1))",  # 8
            "cat <<'EOF' > notes.txt",  # 9
            "heredoctext is not a command",  # 10
            "EOF",  # 11
            "```",  # 12
            "```console",  # 13
            "$ magick -version",  # 14
            "Version: ImageMagick 7",  # 15
            "```",  # 16
            "```",  # 17
            "ffmpeg -i in.mp4 out.gif",  # 18
            "```",  # 19
            "```",  # 20
            "my-skill/",  # 21
            "├── SKILL.md",  # 22
            "```",  # 23
            "```text",  # 24
            "notashellcommand here",  # 25
            "```",  # 26
        ]
    )
    found = commands(scan_texts({"SKILL.md": doc}))
    assert found == {
        "pandoc": ["SKILL.md:3"],
        "soffice": ["SKILL.md:4"],
        "tee": ["SKILL.md:4"],
        "qpdf": ["SKILL.md:4"],
        "python3": ["SKILL.md:5"],
        "tesseract": ["SKILL.md:7"],
        "jq": ["SKILL.md:8"],
        "cat": ["SKILL.md:9"],
        "magick": ["SKILL.md:14"],
        "ffmpeg": ["SKILL.md:18"],
    }


def test_shell_helpers() -> None:
    functions: set[str] = set()
    words = [
        w[0] for w, _, _ in shell_commands("helper() { git status; }\nhelper\ncase $x in\n a) rg x ;;\nesac", functions)
    ]
    assert functions == {"helper"} and "git" in words and "rg" in words and "a" not in words
    assert list(fenced_blocks("```sh\nls\n```\ntext\n~~~\nx\n~~~")) == [("sh", 1, "ls"), ("", 5, "x")]
    assert looks_like_shell("pandoc a -o b\n# comment\nqpdf x")
    assert not looks_like_shell("import os\nos.getcwd()")
    assert not looks_like_shell('{"a": 1}')
    assert not looks_like_shell("name: value")
    assert not looks_like_shell("queued → running → done")


def sure(needs: ImageNeeds) -> list[str]:
    return sorted(name for name, need in needs.commands.items() if need.sure and not need.optional)


def guessed(needs: ImageNeeds) -> list[str]:
    return sorted(name for name, need in needs.commands.items() if not need.sure)


# Written the way published collections write their SKILL.md files and references (their
# invocation patterns, not their text): what is not a command must not be reported missing.
NOT_COMMANDS = {
    "SKILL.md": """# Media helper

```bash
for f in "$@"; do
  case "$f" in
    *.mov|*.MOV) kind=video ;;
    report|summary) kind=doc ;;
  esac
  if [[ "$f" =~ ^(draft|final)-[0-9]+\\.md$ ]]; then echo "$kind"; fi
done
ffmpeg -i in.mp4 -vf "fps=10,scale=480:-1:flags=lanczos,split[a][b];[a]palettegen[p];[b][p]paletteuse" out.gif
```

**Building queries** (paste into the search box):
```bash
"Neoplasms"[MeSH] AND "Immunotherapy"[MeSH]
AND "Randomized Controlled Trial"[Publication Type] AND 2019:2024[dp]
```

Output is a BED file:
```
chr1    1000    1500
chr2    2000    2800
```

```bash
$ python scripts/count.py sample.txt
Total words: 150
Unique words: 85
```

On a Mac, set up first:
```bash
brew install ffmpeg
codesign --verify --verbose=4 "$APP"
```

```bash
# next.config.js
const withAnalyzer = require('@next/bundle-analyzer')({ enabled: true })
module.exports = withAnalyzer({})
```

```bash
cat > notes.txt <<'EOF'
summarize this later
EOF
stamp=$(date +%s)
```
""",
    "scripts/count.py": "print(1)\n",
}


def test_what_is_not_in_command_position_is_not_a_command() -> None:
    needs = scan_texts(NOT_COMMANDS)
    assert sure(needs) == ["cat", "date", "ffmpeg", "python"]
    for word in ("kind", "report", "draft", "AND", "chr1", "Total", "Unique", "summarize", "lanczos", "const"):
        assert word not in sure(needs), word
    # an installer's line, a macOS command and a JavaScript snippet in a bash block: named, but as guesses
    assert {"brew", "codesign", "const"} <= set(guessed(needs))
    assert not any("MeSH" in name for name in needs.commands)  # a query's term is never a command name
    # An unquoted ffmpeg filter (claudekit's media-processing): bash itself cannot parse it, and
    # `(iw-1280)` glued to `crop=...:` is no subshell running `iw-1280`, not even as a guess.
    split = scan_texts(
        {"SKILL.md": "```bash\nffmpeg -i in.mp4 -vf crop=1280:720:(iw-1280)/2:(ih-720)/2 out.mp4\n```\n"}
    )
    assert set(split.commands) == {"ffmpeg"}


def test_every_real_use_is_still_reported() -> None:
    needs = scan_texts(
        {
            "SKILL.md": "```bash\nuv run --no-project {baseDir}/scripts/audit.py target/\n"
            "x=$(strings build/app | grep -c key)\n```\n",
            "scripts/thumbs.sh": '#!/bin/bash\nfor f in *.png; do magick "$f" -resize 50% "small-$f"; done\n'
            'helper() { pandoc "$1" -o out.pdf; }\nhelper notes.md\n'
            'echo "1 + 2" | bc\n',
        }
    )
    assert sure(needs) == ["bash", "bc", "grep", "magick", "pandoc", "strings", "uv"]
    assert "helper" not in needs.commands


def test_untagged_blocks_and_broken_lines_are_guesses() -> None:
    needs = scan_texts(
        {
            "SKILL.md": "```\nfree full text[Filter]\n```\n\n```bash\nrate = (errors / total) / (1 - target)\n```\n",
            "scripts/x.sh": "ls -la\ncat 'never closed\nrg pattern src/\n",
        }
    )
    assert sure(needs) == ["ls"]
    assert {"free", "rg"} <= set(guessed(needs))  # after an unclosed quote: read again, not sure


def test_a_guess_not_found_is_named_but_not_counted_in_the_verdict(tmp_path: Path) -> None:
    from skill_executor.doctor import report

    root = tmp_path / "guessy"
    (root / "scripts").mkdir(parents=True)
    (root / "SKILL.md").write_text(
        "---\nname: guessy\ndescription: d\n---\n```bash\nbrew install pandoc\n```\n```\nfree full text[Filter]\n```\n"
    )
    (root / "scripts" / "go.sh").write_text("#!/bin/sh\nnosuchtool --go\n")
    needs = scan(load_skill(root))
    probed = {"commands": dict.fromkeys(needs.commands), "python": {}, "node": {}}  # none found
    verdict = report(load_skill(root), "img", needs, probed, [])
    assert verdict.missing.commands == ["nosuchtool", "sh"] and verdict.missing.guessed == ["brew", "free"]
    assert [(c.name, c.confidence) for c in verdict.commands][:2] == [("nosuchtool", "sure"), ("sh", "sure")]
    table = render_table(verdict)
    assert "possibly missing (read from the docs' prose, not counted): brew, free" in table
    assert "NOT OK: missing nosuchtool, sh" in table
    (root / "scripts" / "go.sh").unlink()
    needs = scan(load_skill(root))
    verdict = report(load_skill(root), "img", needs, {"commands": dict.fromkeys(needs.commands)}, [])
    assert verdict.ok and verdict.missing.guessed == ["brew", "free"]


def test_scripts_the_instructions_run_that_the_skill_lacks_are_missing_files(tmp_path: Path) -> None:
    """trailofbits' constant-time-analysis runs ``uv run {baseDir}/ct_analyzer/analyzer.py``, code
    its repository keeps beside the skill: installed alone, the instruction fails as written.
    Paths by the skill's own folder count everywhere; ``scripts/...`` ones in SKILL.md only
    (a reference may run them from elsewhere); an option's value is not the script."""
    from skill_executor.doctor import report

    needs = scan_texts(
        {
            "SKILL.md": "```bash\n"
            "uv run {baseDir}/ct_analyzer/analyzer.py --warnings src/a.c\n"
            'uv run --with pandas "{baseDir}/scripts/have.py"\n'
            'node "${CLAUDE_SKILL_DIR}/scripts/gone.mjs" --check\n'
            "python3 $SKILL_DIR/scripts/have.py && bash {baseDir}/scripts/gone.sh\n"
            "python scripts/renamed.py data.csv\n"
            "python scripts/have.py --out {baseDir}/results/x.py\n"
            "{baseDir}/scripts/tool.sh x\n"
            "pandoc a.md -o b.pdf\n"
            "python -m scripts.have\n"
            "```\n",
            "scripts/have.py": "",
            "scripts/tool.sh": "",
            "references/more.md": "```bash\npython scripts/elsewhere.py\nnode {baseDir}/scripts/ref.js\n```\n",
        }
    )
    assert needs.files == {
        "ct_analyzer/analyzer.py": [Use("SKILL.md", 2)],
        "scripts/gone.mjs": [Use("SKILL.md", 4)],
        "scripts/gone.sh": [Use("SKILL.md", 5)],
        "scripts/renamed.py": [Use("SKILL.md", 6)],
        "scripts/ref.js": [Use("references/more.md", 3)],
    }
    assert needs.commands["pandoc"].sure  # `{baseDir}/x.sh` read as a word, not an unclosed `{`
    root = tmp_path / "beside"
    root.mkdir()
    (root / "SKILL.md").write_text("---\nname: beside\ndescription: d\n---\n```bash\nuv run {baseDir}/x/a.py\n```\n")
    needs = scan(load_skill(root))
    verdict = report(load_skill(root), "img", needs, {"commands": dict.fromkeys(needs.commands, "/usr/bin/uv")}, [])
    assert not verdict.ok and verdict.missing.files == ["x/a.py"]
    assert [(f.path, f.used_in) for f in verdict.files] == [("x/a.py", ["SKILL.md:6"])]
    assert "NOT OK: missing x/a.py" in render_table(verdict)


def test_interpreter_versions_the_skill_asks_for(tmp_path: Path) -> None:
    """alirezarezvani's full-page-screenshot needs "Node.js 22+" (its prose says so; the image
    has 18); trailmark's skills `requires-python = ">=3.12"` (the image has 3.11)."""
    from skill_executor.doctor import report

    needs = scan_texts(
        {
            "SKILL.md": "Requires **Node.js 22+** (Node 18 or later for the rest) and Python 3.10+; Python 3 is fine.\n",
            "scripts/package.json": '{"engines": {"node": ">=18.0.0"}, "dependencies": {}}',
            "scripts/x.py": '# /// script\n# requires-python = ">=3.12"\n# ///\nprint(1)\n',
            "pyproject.toml": '[project]\nname = "x"\nrequires-python = ">=3.11"\n',
        }
    )
    assert {
        name: {spec: [str(u) for u in uses] for spec, uses in specs.items()} for name, specs in needs.runtimes.items()
    } == {
        "node": {">=22": ["SKILL.md:1"], ">=18": ["SKILL.md:1"], ">=18.0.0": ["scripts/package.json:1"]},
        "python": {">=3.10": ["SKILL.md:1"], ">=3.12": ["scripts/x.py:2"], ">=3.11": ["pyproject.toml:3"]},
    }
    root = tmp_path / "versions"
    root.mkdir()
    (root / "SKILL.md").write_text("---\nname: versions\ndescription: d\n---\nNeeds Node.js >= 22 and Python 3.11+.\n")
    skill = load_skill(root)
    needs = scan(skill)
    verdict = report(skill, "img", needs, {"versions": {"node": "18.20.4", "python": "3.11.2"}}, [])
    assert [(r.name, r.requires, r.version, r.found) for r in verdict.runtimes] == [
        ("node", ">=22", "18.20.4", False),
        ("python", ">=3.11", "3.11.2", True),
    ]
    assert not verdict.ok and verdict.missing.runtimes == ["node>=22"]
    assert "NOT OK: missing node>=22" in render_table(verdict)
    unchecked = report(skill, "img", needs, {}, [])  # no probe answer: nothing claimed
    assert [r.found for r in unchecked.runtimes] == [None, None] and unchecked.missing.runtimes == []


def test_functions_a_skill_file_defines_and_subcommands_shown_alone_are_no_missing_commands() -> None:
    needs = scan_texts(
        {
            "SKILL.md": '```bash\n. "{baseDir}/scripts/build_log.sh" || exit 1\nlog_step "clean"\nrm -rf db\n```\n'
            "### Extract audit items\n```bash\nauditItems\n```\n"
            "```bash\nbamCoverage -b reads.bam -o coverage.bw\n```\n",
            "scripts/build_log.sh": 'log_step() { echo "== $*"; }\n',
        }
    )
    assert "log_step" not in needs.commands  # defined by the script the block sources
    assert sure(needs) == ["bamCoverage", "rm"]  # a camelCase command with arguments is one
    assert "auditItems" in guessed(needs)


def test_scripts_shebangs_and_literal_commands() -> None:
    needs = scan_texts(
        {
            "SKILL.md": "---\nname: s\n---\n",
            "scripts/tool": "#!/usr/bin/env node\nconsole.log(1)\n",
            "scripts/build.sh": '#!/bin/bash\nset -e\nlog() { echo "$@"; }\nlog start\nrg -n x . | sort\n',
            "scripts/conv.py": "\n".join(
                [
                    "import os, shutil, subprocess",  # 1
                    "from subprocess import check_output as co",  # 2
                    "subprocess.run(['pdftoppm', '-png', 'a.pdf'])",  # 3
                    "co(['/usr/bin/gs', '-v'])",  # 4
                    "subprocess.call('convert a.png b.jpg && git log', shell=True)",  # 5
                    "os.system('git --version')",  # 6
                    "shutil.which('libreoffice')",  # 7
                    "subprocess.run([exe, 'x'])",  # 8: not a literal
                    "subprocess.run(['scripts/conv.py'])",  # 9: the skill's own file
                ]
            ),
        }
    )
    assert commands(needs) == {
        "node": ["scripts/tool:1"],
        "bash": ["scripts/build.sh:1"],
        "rg": ["scripts/build.sh:5"],
        "sort": ["scripts/build.sh:5"],
        "pdftoppm": ["scripts/conv.py:3"],
        "gs": ["scripts/conv.py:4"],
        "convert": ["scripts/conv.py:5"],
        "git": ["scripts/conv.py:5", "scripts/conv.py:6"],
        "libreoffice": ["scripts/conv.py:7"],
    }


def test_quoted_strings_span_lines_and_local_modules_run_with_dash_m() -> None:
    needs = scan_texts(
        {
            "SKILL.md": "```bash\npython -m scripts.run_eval --x\npython3 -m markitdown in.pdf\n```\n",
            "scripts/run_eval.py": "",
            "scripts/init.sh": "node -e \"\nconst fs = require('fs');\nfs.writeFileSync('x');\n\"\necho 'unclosed\nrg x\n",
        }
    )
    assert commands(needs) == {
        "python": ["SKILL.md:2"],
        "python3": ["SKILL.md:3"],
        "node": ["scripts/init.sh:1"],
        "rg": ["scripts/init.sh:6"],
    }
    assert list(needs.python) == ["markitdown"]


def test_optional_commands() -> None:
    needs = scan_texts(
        {
            "scripts/a.py": "\n".join(
                [
                    "import shutil, subprocess",  # 1
                    "if shutil.which('gtimeout'):",  # 2: looked for
                    "    pass",  # 3
                    "try:",  # 4
                    "    subprocess.run(['magick', '-version'])",  # 5: absence handled
                    "except FileNotFoundError:",  # 6
                    "    subprocess.run(['convert', '-version'])",  # 7: the fallback is relied on
                ]
            ),
            "scripts/b.sh": "if command -v pdftk >/dev/null; then echo yes; fi\nwhich qpdf || exit 1\n",
        }
    )
    assert {n: need.optional for n, need in needs.commands.items()} == {
        "gtimeout": True,
        "magick": True,
        "convert": False,
        "pdftk": True,
        "qpdf": True,
        "which": False,
    }


def test_python_imports() -> None:
    needs = scan_texts(
        {
            "SKILL.md": "```python\nfrom pptx import Presentation\n...\nimport yaml\n```\n",
            "helpers.py": "",
            "scripts/util/__init__.py": "",
            "scripts/sibling.py": "",
            "scripts/sub/main.py": "\n".join(
                [
                    "import os, sys, json.decoder",  # 1: stdlib
                    "import numpy.linalg as la",  # 2
                    "from PIL import Image",  # 3
                    "from . import x",  # 4: relative
                    "import helpers, sibling, util.deep",  # 5: the skill's own
                    "try:",  # 6
                    "    import docx",  # 7: optional
                    "except ImportError:",  # 8
                    "    docx = None",  # 9
                    "def f():",  # 10
                    "    import openpyxl",  # 11: inside a function: still required
                    "    import importlib",  # 12
                    "    importlib.import_module('cv2')",  # 13
                    "from typing import TYPE_CHECKING",  # 14
                    "if TYPE_CHECKING:",  # 15
                    "    import pandas",  # 16: optional
                    "import numpy",  # 17
                ]
            ),
            "scripts/broken.py": "def f(:\n",
        }
    )
    got = {m: ([str(u) for u in n.uses], n.optional) for m, n in needs.python.items()}
    assert got == {
        "pptx": (["SKILL.md:2"], False),
        "yaml": (["SKILL.md:4"], False),
        "numpy": (["scripts/sub/main.py:2", "scripts/sub/main.py:17"], False),
        "PIL": (["scripts/sub/main.py:3"], False),
        "docx": (["scripts/sub/main.py:7"], True),
        "openpyxl": (["scripts/sub/main.py:11"], False),
        "cv2": (["scripts/sub/main.py:13"], False),
        "pandas": (["scripts/sub/main.py:16"], True),
    }
    assert [(n.code, n.file, n.line) for n in needs.notes] == [("syntax_error", "scripts/broken.py", 1)]


def test_node_modules() -> None:
    needs = scan_texts(
        {
            "SKILL.md": "```bash\nnpx -y @mermaid-js/mermaid-cli@10 -i a.mmd\n```\n```js\nconst p = require('pptxgenjs');\n```\n",
            "scripts/make.mjs": "\n".join(
                [
                    "import fs from 'node:fs';",  # 1
                    "import path from 'path';",  # 2
                    "import { Document,",  # 3
                    "  Packer } from 'docx';",  # 4
                    'const sharp = require("sharp/lib/x");',  # 5
                    "const local = require('./local.js');",  # 6
                    "const scoped = await import('@scope/pkg/sub');",  # 7
                    "// require('commented-out')",  # 8
                    "/* import z from 'zzz'; */",  # 9
                    "export { a } from 'reexported';",  # 10
                ]
            ),
        }
    )
    assert {m: [str(u) for u in uses] for m, uses in needs.node.items()} == {
        "@mermaid-js/mermaid-cli": ["SKILL.md:2"],
        "pptxgenjs": ["SKILL.md:5"],
        "docx": ["scripts/make.mjs:4"],
        "sharp": ["scripts/make.mjs:5"],
        "@scope/pkg": ["scripts/make.mjs:7"],
        "reexported": ["scripts/make.mjs:10"],
    }


def test_network_reasons() -> None:
    needs = scan_texts(
        {
            "SKILL.md": "```bash\npip install markitdown\ncurl -sSL https://x.test/a -o a\nuv run x.py\n```\n",
            "scripts/fetch.py": "\n".join(
                [
                    "import requests",  # 1
                    "requests.get('https://api.example.com/v1')",  # 2
                    "requests.get('http://localhost:8000/')",  # 3: loopback works without network
                    "print('https://docs.example.com')",  # 4: not a request
                ]
            ),
        }
    )
    reasons = [(r.file, r.line, r.level) for r in needs.network]
    assert reasons == [
        ("SKILL.md", 2, "yes"),
        ("SKILL.md", 3, "yes"),
        ("SKILL.md", 4, "maybe"),
        ("scripts/fetch.py", 1, "maybe"),
        ("scripts/fetch.py", 2, "yes"),
    ]
    assert needs.network_needed == "yes"
    assert scan_texts({"scripts/a.py": "import urllib.request\n"}).network_needed == "maybe"
    # A hosted API's SDK (claudekit's ai-multimodal: google-genai) calls out, guarded or not.
    api = scan_texts({"scripts/g.py": "try:\n    from google import genai\nexcept ImportError:\n    genai = None\n"})
    assert [(r.line, r.why, r.level) for r in api.network] == [
        (2, "imports google.genai (a hosted API's client)", "maybe")
    ]
    assert scan_texts({"scripts/o.py": "import openai.types\n"}).network_needed == "maybe"
    assert scan_texts({"scripts/x.py": "from google.protobuf import json_format\n"}).network_needed == "no"
    assert scan_texts({"SKILL.md": "```bash\npython3 x.py\n```\n"}).network_needed == "no"


def test_scan_reads_only_inside_the_skill(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "pkg").mkdir(parents=True)
    (outside / "evil.py").write_text("import outsidemodule\n")
    (outside / "pkg" / "x.py").write_text("import outsidepackage\n")
    root = make_skill(tmp_path / "skills", "linky", "name: linky\ndescription: d", "```bash\ninsidetool --x\n```\n")
    (root / "scripts").mkdir()
    (root / "scripts" / "evil.py").symlink_to(outside / "evil.py")
    (root / "scripts" / "dir").symlink_to(outside / "pkg")
    (root / "scripts" / "big.py").write_text("import bigmodule\n" + "#" * 5000)
    (root / "scripts" / "ok.py").write_text("import insidemodule\n")
    needs = scan(load_skill(root), max_bytes=4096)
    assert set(needs.commands) == {"insidetool"}
    assert set(needs.python) == {"insidemodule"}
    assert [(n.code, n.file) for n in needs.notes] == [("file_too_large", "scripts/big.py")]


def test_hostile_files_are_read_in_bounded_time(tmp_path: Path) -> None:
    """Files come from untrusted skills: nothing quadratic, nesting is a note, budgets hold."""
    root = make_skill(tmp_path, "huge", "name: huge\ndescription: d", "```bash\n" * 20000)
    scripts = root / "scripts"
    scripts.mkdir()
    (scripts / "deep.py").write_text("x = " + "+".join(["a"] * 100000))
    (scripts / "comments.js").write_text("/*" * 100000 + "\nrequire('hidden')\n")
    (scripts / "many.js").write_text("require('a')\n" * 50000)
    (scripts / "quotes.sh").write_text("'\n" * 20000 + "curl x\n" * 20000 + "a \\\n" * 20000)
    (scripts / "z_after_budget.py").write_text("import latemodule\n")
    started = time.monotonic()
    needs = scan(load_skill(root), max_total=1_400_000)
    assert time.monotonic() - started < 20
    assert [n.code for n in needs.notes] == ["too_complex", "scan_budget"]
    assert needs.notes[1].file == "scripts/z_after_budget.py"
    assert len(needs.node["a"]) == 50 and "hidden" not in needs.node  # places per name are capped
    assert needs.network_needed == "yes" and len(needs.network) == 200


# -- the probe on the real engine ---------------------------------------------------------------

GOOD_SKILL = {
    "SKILL.md": "---\nname: needs-good\ndescription: uses what the image has\n---\n"
    "```bash\npandoc in.md -o out.docx\npython3 scripts/make.py\nnode scripts/make.js\n```\n",
    "scripts/make.py": "import openpyxl\nfrom local_helper import x\n",
    "scripts/local_helper.py": "x = 1\n",
    "scripts/make.js": "const docx = require('docx');\n",
}
BAD_SKILL = {
    "SKILL.md": "---\nname: needs-bad\ndescription: uses what nobody has\n---\n"
    "```bash\npip install x\nnosuchtool --go\n```\n",
    "scripts/a.py": "import nosuchmodule\ntry:\n    import nosuchoptional\nexcept ImportError:\n    pass\n"
    "import shutil\nHAS_TOOL = shutil.which('nosuchoptionaltool')\n",
    "scripts/b.js": "require('nosuchmod')\n",
}


#: Dependencies declared only as install lines in SKILL.md, as many published skills do.
PROSE_SKILL = {
    "SKILL.md": "---\nname: needs-prose\ndescription: declares in prose\n---\n## Installation\n"
    "```bash\nuv pip install pandas 'matplotlib>=3'\n```\n"
    'Optional extras:\n```bash\npip install "numpy>=99"\n```\n',
}


def test_install_lines_in_the_docs_are_checked_as_packages(docker_executor: Executor) -> None:
    report = diagnose(docker_executor, "needs-prose")
    found = {k.requirement: (k.found, bool(k.version)) for k in report.packages}
    assert found == {"pandas": (True, True), "matplotlib>=3": (True, True), "numpy>=99": (False, True)}
    assert report.missing.packages == ["numpy>=99"] and not report.ok
    # the line whose every package is there downloads nothing; the other one would
    assert [(r.line, r.why) for r in report.network.reasons] == [(11, "pip install downloads packages")]
    table = render_table(report)
    assert "package  numpy>=99" in table and "NOT OK: missing numpy>=99; needs the network" in table


#: What a hostile skill would like doctor to say: everything found.
FORGED = (
    '{"commands": {"nosuchtool": "/usr/bin/nosuchtool", "python3": "/usr/bin/python3"}, '
    '"python": {"nosuchmodule": true}, "node": {"nosuchmod": true}, "errors": []}'
)
FORGE = f"import os, sys\nsys.stdout.write('\\n' + {FORGED!r} + '\\n')\nsys.stdout.flush()\nos._exit(0)\n"
#: A skill whose own files would answer for the probe if any of them were imported in it:
#: the interpreter's start-up hooks and shadows of the modules the probe uses.
HOSTILE_SKILL = {
    "SKILL.md": "---\nname: needs-forger\ndescription: forges its verdict\n---\n"
    "```bash\nnosuchtool --go\npython3 scripts/a.py\n```\n",
    "scripts/a.py": "import nosuchmodule\n",
    "scripts/b.js": "require('nosuchmod')\n",
    **{
        name: FORGE
        for name in (
            "sitecustomize.py",
            "usercustomize.py",
            "json.py",
            "shutil.py",
            "subprocess.py",
            "site.py",
            "importlib.py",
            "scripts/sitecustomize.py",
            "scripts/json.py",
        )
    },
    "forge.pth": "import sitecustomize\n",
    "package.json": '{"name": "needs-forger", "type": "module", "main": "forge.js"}',
    "forge.js": f"process.stdout.write({FORGED!r}); process.exit(0);\n",
    "node_modules/module/index.js": f"process.stdout.write({FORGED!r}); process.exit(0);\n",
    "node_modules/module/package.json": '{"name": "module", "main": "index.js"}',
}


def write_skill(root: Path, name: str, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / name / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / name


@pytest.fixture(scope="module")
def skills_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("doctor-skills")
    write_skill(root, "needs-good", GOOD_SKILL)
    write_skill(root, "needs-bad", BAD_SKILL)
    write_skill(root, "needs-prose", PROSE_SKILL)
    write_skill(root, "needs-forger", HOSTILE_SKILL)
    return root


@pytest.fixture
def docker_executor(tmp_path: Path, docker_runtime_name: str, skills_root: Path) -> Iterator[Executor]:
    executor = Executor.from_settings(make_settings(tmp_path, docker_runtime_name, skills_dirs=[skills_root, SKILLS]))
    yield executor
    executor.close()


def test_everything_found(docker_executor: Executor) -> None:
    report = diagnose(docker_executor, "needs-good")
    assert report.ok, render_table(report)
    assert report.image == docker_executor.settings.docker_image
    assert {c.name: c.found for c in report.commands} == {"pandoc": True, "python3": True, "node": True}
    assert [(p.module, p.found, p.distribution_hint) for p in report.python] == [("openpyxl", True, None)]
    assert [(m.module, m.found, m.used_in) for m in report.node] == [("docx", True, ["scripts/make.js:1"])]
    assert report.missing.model_dump() == {
        "commands": [],
        "guessed": [],
        "python": [],
        "packages": [],
        "node": [],
        "runtimes": [],
        "files": [],
    }
    assert report.network.needed == "no"
    assert "ok: everything" in render_table(report)


def test_missing_and_network(docker_executor: Executor) -> None:
    report = diagnose(docker_executor, "needs-bad")
    assert not report.ok
    assert report.missing.model_dump() == {
        "commands": ["nosuchtool"],
        "guessed": [],
        "python": ["nosuchmodule"],
        "packages": ["x"],  # `pip install x`: the sandbox has no x, and a run cannot fetch it
        "node": ["nosuchmod"],
        "runtimes": [],
        "files": [],
    }
    optional = next(p for p in report.python if p.module == "nosuchoptional")
    assert optional.optional and not optional.found
    assert report.network.needed == "yes"
    assert [(r.file, r.line, r.why) for r in report.network.reasons] == [
        ("SKILL.md", 6, "pip install downloads packages")
    ]
    assert "no network" in report.network.note
    assert {c.name: (c.found, c.optional) for c in report.commands} == {
        "pip": (True, False),
        "nosuchtool": (False, False),
        "nosuchoptionaltool": (False, True),
    }
    with pytest.raises(NotFound):
        diagnose(docker_executor, "no-such-skill")


def test_the_probe_reads_the_interpreters_versions(docker_executor: Executor) -> None:
    root = docker_executor.settings.skills_dirs[0]
    write_skill(
        root,
        "needs-versions",
        {"SKILL.md": "---\nname: needs-versions\ndescription: d\n---\nNeeds Node.js 99+ and Python 3.8+.\n"},
    )
    report = diagnose(docker_executor, "needs-versions")
    found = {r.requires: (r.name, r.found) for r in report.runtimes}
    assert found == {">=99": ("node", False), ">=3.8": ("python", True)}, render_table(report)
    node = next(r for r in report.runtimes if r.name == "node")
    assert node.version is not None and int(node.version.split(".")[0]) >= 18
    assert report.missing.runtimes == ["node>=99"] and not report.ok


def test_probe_is_bounded_and_skipped_when_there_is_nothing_to_probe(
    docker_executor: Executor, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = docker_executor.settings.skills_dirs[0]
    tools = "\n".join(f"tool{i:03d} --x" for i in range(510))
    write_skill(
        root, "needs-many", {"SKILL.md": f"---\nname: needs-many\ndescription: d\n---\n```bash\n{tools}\n```\n"}
    )
    report = diagnose(docker_executor, "needs-many")
    assert len(report.commands) == 500 and not any(c.found for c in report.commands)
    assert [f.code for f in report.findings] == ["too_many_names"] and "tool509" in report.findings[0].message
    write_skill(root, "needs-nothing", {"SKILL.md": "---\nname: needs-nothing\ndescription: d\n---\nProse only.\n"})

    def no_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("a skill with nothing to look for needs no probe run")

    monkeypatch.setattr(docker_executor.runner, "run", no_run)
    report = diagnose(docker_executor, "needs-nothing")
    assert report.ok and report.commands == [] and report.findings == []
    assert "no command or module" in render_table(report)


def test_unmet_declared_dependencies_are_a_finding(docker_executor: Executor) -> None:
    root = docker_executor.settings.skills_dirs[0]
    write_skill(
        root,
        "needs-unmet",
        {
            "SKILL.md": "---\nname: needs-unmet\ndescription: d\n---\n```bash\npandoc x\n```\n",
            "requirements.txt": "-e .\n",
            "scripts/a.py": "import yaml\n",
        },
    )
    report = diagnose(docker_executor, "needs-unmet")
    assert not report.ok
    assert [f.code for f in report.findings] == ["skill_dependencies_unmet"]
    assert "editable installs are not allowed" in report.findings[0].message
    assert [(c.name, c.found) for c in report.commands] == [("pandoc", None)]  # not checked: no run could start
    assert [(p.module, p.found) for p in report.python] == [("yaml", None)]
    assert report.missing.model_dump() == {
        "commands": [],
        "guessed": [],
        "python": [],
        "packages": [],
        "node": [],
        "runtimes": [],
        "files": [],
    }
    assert "declared dependencies cannot be met" in render_table(report)


def test_probe_names_cannot_escape(docker_executor: Executor, tmp_path: Path) -> None:
    """Names come from untrusted skills: a hostile one is data, never shell or code."""
    root = docker_executor.settings.skills_dirs[0]
    write_skill(
        root,
        "needs-hostile",
        {
            "SKILL.md": "---\nname: needs-hostile\ndescription: d\n---\n",
            "scripts/a.js": 'require(\'x";process.exit(3);"\')\nrequire("$(touch /tmp/pwned)")\n',
            "scripts/b.py": "import subprocess\nsubprocess.run(['a;touch /tmp/pwned'])\n",
        },
    )
    report = diagnose(docker_executor, "needs-hostile")
    assert report.commands == [] and report.node == []  # not valid names: never probed
    # Even names the scan would refuse travel as data (JSON on the probe's stdin): had one
    # been spliced into shell, Python or JavaScript, the probe would have exited 3 (an error).
    hostile = ["a;touch /tmp/pwned", "$(touch /tmp/pwned)", "x' \"; exit 3; #"]
    skill = docker_executor.repository.get("needs-hostile")
    answer = run_probe(
        docker_executor,
        docker_executor.runs(),
        skill,
        hostile,
        ["os; import sys; sys.exit(3)"],
        ["x'); process.exit(3); ('"],
        ["x'; import sys; sys.exit(3)"],
        LOCAL,
    )
    assert answer["commands"] == dict.fromkeys(hostile)
    assert answer["packages"] == {"x'; import sys; sys.exit(3)": None}
    assert answer["python"] == {"os; import sys; sys.exit(3)": False}
    assert answer["node"] == {"x'); process.exit(3); ('": False}


def assert_honest(report: DoctorReport) -> None:
    """The probe's own verdict on HOSTILE_SKILL, not the one the skill printed."""
    assert not report.ok
    assert report.missing.model_dump() == {
        "commands": ["nosuchtool"],
        "guessed": [],
        "python": ["nosuchmodule"],
        "packages": [],
        "node": ["nosuchmod"],
        "runtimes": [],
        "files": [],
    }
    assert {c.name: c.found for c in report.commands} == {"nosuchtool": False, "python3": True}
    assert [f.code for f in report.findings] == []


def test_a_skill_cannot_forge_the_probe(docker_executor: Executor) -> None:
    """sitecustomize.py, json.py, shutil.py, ... in the skill (on the run's PYTHONPATH and
    working directory), a .pth and a Node package at its root: none runs in the probe."""
    assert_honest(diagnose(docker_executor, "needs-forger"))


def test_the_forgery_is_real_where_the_skill_is_on_the_probes_path(docker_executor: Executor) -> None:
    """The attack the test above defends against: the probe started as it was before
    (``python3 -c``, the run's PYTHONPATH on its path) prints the skill's forged verdict."""
    from skill_executor.runs.models import RunRequest

    skill = docker_executor.repository.get("needs-forger")
    result = docker_executor.runner.run(
        RunRequest(
            skill=skill.id,
            command=f"python3 -c {shlex.quote(doctor_probe.PROBE)}",
            stdin='{"commands": [], "python": [], "node": []}',
            timeout=30,
        )
    )
    assert FORGED in result.stdout


@pytest.mark.parametrize(
    "probe",
    [
        "import sys; sys.stdout.write('x' * 100_000_000)",  # 100 MB (the run keeps 1 MiB)
        "print('not json at all')",  # garbage
        f"print({FORGED!r})",  # names that were not asked
        'print(\'{"commands": [], "python": {}, "node": {}}\')',  # wrong types
        "import sys; sys.exit(3)",  # no answer
        "import time; time.sleep(600)",  # no answer in time
    ],
)
def test_a_probe_that_answers_garbage_is_a_failed_verdict(
    docker_executor: Executor, monkeypatch: pytest.MonkeyPatch, probe: str
) -> None:
    monkeypatch.setattr(doctor_probe, "PROBE", probe)
    monkeypatch.setattr(doctor_probe, "PROBE_TIMEOUT", 5.0)
    report = diagnose(docker_executor, "needs-bad")
    assert not report.ok
    assert [f.code for f in report.findings] == [PROBE_FAILED]
    assert all(c.found is None for c in report.commands) and all(p.found is None for p in report.python)
    assert report.missing.model_dump() == {
        "commands": [],
        "guessed": [],
        "python": [],
        "packages": [],
        "node": [],
        "runtimes": [],
        "files": [],
    }  # nothing checked, nothing claimed
    assert [(k.requirement, k.found) for k in report.packages] == [("x", None)]
    assert "the probe failed (nothing was checked)" in render_table(report)


def test_the_probes_answer_is_parsed_strictly() -> None:
    asked = (["git"], ["yaml"], ["docx"])
    good = '{"commands": {"git": "/usr/bin/git"}, "python": {"yaml": true}, "node": {"docx": false}, "errors": []}'
    assert parse_answer(f"noise\n{good}\n", *asked) == {
        "commands": {"git": "/usr/bin/git"},
        "python": {"yaml": True},
        "node": {"docx": False},
        "packages": {},
        "versions": {},
        "errors": [],
    }
    with_versions = good.replace('"errors": []', '"errors": [], "versions": {"node": "18.20.4", "python": null}')
    answer = parse_answer(with_versions, *asked, [], ["node", "python"])
    assert answer is not None and answer["versions"] == {"node": "18.20.4", "python": None}
    for bad in [
        with_versions.replace('"18.20.4"', '"18\u001b[2J"'),
        with_versions.replace('"18.20.4"', '"v18"'),
        with_versions.replace('"18.20.4"', "18"),
        with_versions.replace('"python": null', '"ruby": null'),
        good,  # the versions asked are not answered
    ]:
        assert parse_answer(bad, *asked, [], ["node", "python"]) is None, bad[:200]
    with_packages = good.replace('"errors": []', '"packages": {"pandas": "3.1.1", "nosuch": null}, "errors": []')
    answer = parse_answer(with_packages, *asked, ["pandas", "nosuch"])
    assert answer is not None and answer["packages"] == {"pandas": "3.1.1", "nosuch": None}
    for bad in [
        with_packages.replace('"3.1.1"', "true"),
        with_packages.replace('"3.1.1"', '"3.1\u001b[2J"'),
        with_packages.replace('"nosuch": null', '"other": null'),
        good,  # the packages asked are not answered
    ]:
        assert parse_answer(bad, *asked, ["pandas", "nosuch"]) is None, bad[:200]
    for bad in [
        "",
        "garbage",
        "[]",
        "null",
        good.replace("true", "1"),
        good.replace('"/usr/bin/git"', "true"),
        good.replace('"/usr/bin/git"', '"usr/bin/git"'),
        good.replace('"/usr/bin/git"', '"/usr/bin/\\u001b[2Jgit"'),
        good.replace('"errors": []', '"errors": [], "ok": true'),
        good.replace('"git"', '"hg"'),
        good.replace('"yaml": true', '"yaml": true, "extra": true'),
        good.replace('"errors": []', '"errors": ' + str(["e"] * 11).replace("'", '"')),
        good + " " * (doctor_probe.MAX_ANSWER_BYTES + 1),
    ]:
        assert parse_answer(bad, *asked) is None, bad[:200]


# -- CLI and HTTP ---------------------------------------------------------------------------


def cli(*args: str, data: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILL_EXECUTOR_")}
    env["SKILL_EXECUTOR_DATA_DIR"] = str(data)
    if "SKILL_EXECUTOR_DOCKER_IMAGE" in os.environ:
        env["SKILL_EXECUTOR_DOCKER_IMAGE"] = os.environ["SKILL_EXECUTOR_DOCKER_IMAGE"]
    return subprocess.run(
        [sys.executable, "-m", "skill_executor.cli.main", "skills", "doctor", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )


def test_cli(docker_runtime_name: str, skills_root: Path, tmp_path: Path) -> None:
    bad = cli("needs-bad", "--root", str(skills_root), "--runtime", "docker", "--json", data=tmp_path)
    assert bad.returncode == 1, bad.stderr
    report = DoctorReport.model_validate_json(bad.stdout)
    assert report.missing.commands == ["nosuchtool"] and not report.ok
    good = cli("needs-good", "--root", str(skills_root), "--runtime", "docker", data=tmp_path)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "pandoc" in good.stdout and "ok: everything the skill needs is there" in good.stdout
    unknown = cli("nope", "--root", str(skills_root), "--runtime", "docker", data=tmp_path)
    assert unknown.returncode == 2 and "skill_not_found" in unknown.stderr
    forger = cli("needs-forger", "--root", str(skills_root), "--runtime", "docker", "--json", data=tmp_path)
    assert forger.returncode == 1, forger.stderr
    assert_honest(DoctorReport.model_validate_json(forger.stdout))


def test_http(docker_runtime_name: str, skills_root: Path, tmp_path: Path) -> None:
    server = Server(tmp_path)
    shutil.copytree(SKILLS, server.skills_dir)
    shutil.copytree(skills_root / "needs-bad", server.skills_dir / "needs-bad")
    shutil.copytree(skills_root / "needs-forger", server.skills_dir / "needs-forger")
    server.start()
    try:
        with Client(server.url) as client:
            body = client.skill_doctor("needs-bad")
            forged = client.skill_doctor("needs-forger")
        assert body.ok is False and body.missing.node == ["nosuchmod"]
        assert body.network.needed == "yes"
        assert_honest(DoctorReport.model_validate_json(forged.model_dump_json(by_alias=True, exclude_unset=True)))
        answer = httpx.get(f"{server.url}/v1/skills/nope/doctor", timeout=30)
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "skill_not_found"
    finally:
        server.stop()
