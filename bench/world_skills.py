"""Issue 28's end-to-end check: published skills, installed and run the way their SKILL.md says.

Reads five public collections from a folder of checkouts (``--collections``, one
``<owner>+<name>/`` folder each, as ``git clone`` or a snapshot leaves them: this script fetches
nothing), starts a real service from this tree (``skill-executor serve`` on a free loopback
port, a temporary data dir, the docker runtime, ``SKILL_EXECUTOR_SKILL_DEPS_FROM_DOCS=true``),
installs every skill of the table through the API (``POST /v1/skills``, the skill's folder as
``files[]``, as ``skills push`` sends it), asks its doctor (``GET /v1/skills/{name}/doctor``) and
runs each invocation as the skill's SKILL.md writes it (``POST /v1/runs``; ``{baseDir}`` and the
like written as ``$SKILL_DIR``, input paths as ``$WORK_DIR/inputs/...``) with inputs made here:
a PDF, a CSV, a JPEG, an MP4, a YARA rule, a C file, a small JS project, ... (made in a plain
``docker run --network none`` of the image, uploaded with ``POST /v1/files``).

    PYTHONPATH=$PWD .venv/bin/python bench/world_skills.py --collections /tmp/world \\
        --image skill-executor/runner:<tag> [--only NAME ...] [--json results.json]
    ... --plain [--envs DATA/envs] --only NAME ...
        # the skills' invocations in a plain `docker run --network none` of the image (the
        # skill copied to /workspace/skills/<name>, inputs in work/inputs; --envs: a kept
        # service's resolved environments on the import paths): does a failure fail the
        # same way without the service?

Prints one Markdown row per invocation (skill, invocation, result, doctor verdict), the table of
``docs/guides/world-skills.md``.  Nothing of the collections is copied anywhere but the temporary
data dir.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skill_executor_client import Client

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Invocation:
    command: str
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    cwd: str | None = None
    timeout: int = 180


@dataclass(frozen=True)
class Case:  # noqa: D101 - one published skill and its invocations
    collection: str
    path: str
    pattern: str
    invocations: tuple[Invocation, ...] = field(default_factory=tuple)


def inv(command: str, *inputs: str, outputs: tuple[str, ...] = (), cwd: str | None = None) -> Invocation:
    return Invocation(command, tuple(inputs), outputs, cwd)


TOB = "trailofbits+skills"
OBRA = "obra+superpowers"
KD = "K-Dense-AI+claude-scientific-skills"
AR = "alirezarezvani+claude-skills"
CK = "mrgoonie+claudekit-skills"

CASES: tuple[Case, ...] = (
    Case(
        TOB,
        "plugins/culture-index/skills/interpreting-culture-index",
        "uv run --no-project, scripts/pyproject.toml",
        (
            inv(
                'uv run --no-project "$SKILL_DIR/scripts/extract_pdf.py" --verify "$WORK_DIR/inputs/doc.pdf" "$OUTPUT_DIR/ci.json"',
                "doc.pdf",
                outputs=("out/*.json",),
            ),
        ),
    ),
    Case(
        TOB,
        "plugins/yara-authoring/skills/yara-rule-authoring",
        "uv run PEP 723 (yara-x)",
        (
            inv('uv run "$SKILL_DIR/scripts/yara_lint.py" "$WORK_DIR/inputs/rule.yar"', "rule.yar"),
            inv('uv run "$SKILL_DIR/scripts/atom_analyzer.py" "$WORK_DIR/inputs/rule.yar"', "rule.yar"),
        ),
    ),
    Case(
        TOB,
        "plugins/let-fate-decide/skills/let-fate-decide",
        "uv run --no-config, scripts/pyproject.toml",
        (inv('uv run --no-config "$SKILL_DIR/scripts/draw_cards.py"'),),
    ),
    Case(
        TOB,
        "plugins/constant-time-analysis/skills/constant-time-analysis",
        "uv run, code beside the skill",
        (inv('uv run "$SKILL_DIR/ct_analyzer/analyzer.py" --warnings "$WORK_DIR/inputs/ct.c"', "ct.c"),),
    ),
    Case(
        TOB,
        "plugins/trailmark/skills/slicing-code-context",
        "uv run, requires-python >= 3.12",
        (
            inv(
                'uv run "$SKILL_DIR/scripts/build_slice_packet.py" --target-dir "$WORK_DIR/inputs" --symbol main'
                " --mode neighborhood --depth 1 --budget-tokens 8192 --language auto --format json",
                "ct.c",
            ),
        ),
    ),
    Case(
        TOB,
        "plugins/static-analysis/skills/codeql",
        "a CLI the image lacks (codeql)",
        (inv("codeql resolve languages --format=json"),),
    ),
    Case(
        OBRA,
        "skills/writing-skills",
        "node script on a ../sibling skill, graphviz",
        (
            inv("./render-graphs.js ../brainstorming", outputs=("**/*.svg",)),
            inv("./render-graphs.js ../writing-skills --combine", outputs=("**/*.svg",)),
        ),
    ),
    Case(
        OBRA,
        "skills/systematic-debugging",
        "bash script driving npm test",
        (
            inv(
                'cd "$WORK_DIR" && tar xzf inputs/jsproj.tar.gz && cd jsproj'
                ' && "$SKILL_DIR/find-polluter.sh" .polluted "tests/*.test.js"',
                "jsproj.tar.gz",
            ),
        ),
    ),
    Case(
        OBRA,
        "skills/brainstorming",
        "background node server + curl",
        (
            inv(
                'out=$(scripts/start-server.sh --project-dir "$WORK_DIR/proj") && echo "$out"'
                ' && sleep 1 && curl -sf "$(echo "$out" | jq -r .url)" | head -c 120'
            ),
        ),
    ),
    Case(
        KD,
        "scientific-skills/exploratory-data-analysis",
        "python script, cwd output",
        (
            inv(
                'python scripts/eda_analyzer.py "$WORK_DIR/inputs/data.csv" output_report.md',
                "data.csv",
                outputs=("*.md",),
            ),
        ),
    ),
    Case(
        KD,
        "scientific-skills/pymoo",
        "`uv pip install pymoo` line",
        (inv("python3 scripts/single_objective_example.py"),),
    ),
    Case(
        KD,
        "scientific-skills/medchem",
        "`uv pip install medchem` line",
        (
            inv(
                'python scripts/filter_molecules.py "$WORK_DIR/inputs/mols.csv" --rules rule_of_five,rule_of_cns'
                " --alerts nibr --output filtered.csv",
                "mols.csv",
                outputs=("*.csv",),
            ),
        ),
    ),
    Case(
        KD,
        "scientific-skills/matplotlib",
        "python script, cwd outputs",
        (inv("python scripts/plot_template.py", outputs=("*.png",)),),
    ),
    Case(
        KD,
        "scientific-skills/citation-management",
        "python script on a .bib",
        (
            inv(
                'python scripts/format_bibtex.py "$WORK_DIR/inputs/refs.bib" --output formatted_references.bib',
                "refs.bib",
                outputs=("*.bib",),
            ),
        ),
    ),
    Case(
        KD,
        "scientific-skills/markitdown",
        "`pip install 'markitdown[all]'` line, its CLI",
        (inv('markitdown "$WORK_DIR/inputs/doc.pdf" -o output.md', "doc.pdf", outputs=("*.md",)),),
    ),
    Case(
        KD,
        "scientific-skills/scikit-learn",
        "python script, bare imports",
        (inv("python scripts/classification_pipeline.py"),),
    ),
    Case(
        AR,
        "marketing-skill/skills/campaign-analytics",
        "python script on a skill asset",
        (inv("python scripts/attribution_analyzer.py assets/sample_campaign_data.json --model time-decay"),),
    ),
    Case(
        AR,
        "marketing-skill/skills/schema-markup",
        "python script on an HTML page",
        (inv('python3 scripts/schema_validator.py "$WORK_DIR/inputs/page.html"', "page.html"),),
    ),
    Case(
        AR,
        "engineering-team/skills/cloud-security",
        "python script, JSON out",
        (
            inv(
                'python3 scripts/cloud_posture_check.py "$WORK_DIR/inputs/policy.json" --check iam --json',
                "policy.json",
            ),
        ),
    ),
    Case(
        AR,
        "engineering/skills/full-page-screenshot",
        "ESM node script, Node 22 WebSocket + CDP",
        (
            # SKILL.md has the user open their Chrome for remote debugging; in a sandbox the agent
            # starts one (its DevToolsActivePort is where the script looks first)
            inv(
                "chromium --remote-debugging-port=9222 --user-data-dir=$HOME/.config/chromium about:blank"
                " >/dev/null 2>&1 & for i in $(seq 50); do test -s $HOME/.config/chromium/DevToolsActivePort"
                ' && break; sleep 0.2; done; node "${SKILL_DIR}/scripts/full-page-screenshot.mjs" --check'
                ' && node "${SKILL_DIR}/scripts/full-page-screenshot.mjs" --url "file://$WORK_DIR/inputs/page.html"'
                ' "$OUTPUT_DIR/shot.png" --width 800 --dpr 1 --wait 1000',
                "page.html",
                outputs=("out/shot.png",),
            ),
        ),
    ),
    Case(
        AR,
        "marketing-skill/skills/social-media-analyzer",
        "python script on a skill asset",
        (inv("python scripts/calculate_metrics.py assets/sample_input.json"),),
    ),
    Case(
        CK,
        ".claude/skills/chrome-devtools",
        "scripts/package.json with puppeteer, ESM",
        (
            inv('cd scripts && node navigate.js --url "file://$WORK_DIR/inputs/page.html"', "page.html"),
            inv(
                'cd scripts && node screenshot.js --url "file://$WORK_DIR/inputs/page.html"'
                " --output ./docs/screenshots/page.png",
                "page.html",
                outputs=("scripts/docs/screenshots/*.png",),
            ),
            inv(
                'cd scripts && node screenshot.js --url "file://$WORK_DIR/inputs/page.html" --output page.png',
                "page.html",
                outputs=("scripts/*.png",),
            ),
        ),
    ),
    Case(
        CK,
        ".claude/skills/media-processing",
        "magick (IM7 command)",
        (
            inv(
                'cd "$OUTPUT_DIR" && magick "$WORK_DIR/inputs/photo.jpg" -resize 800x600 output.jpg'
                ' && magick "$WORK_DIR/inputs/photo.jpg" -resize 200x200^ -gravity center -extent 200x200 thumb.jpg',
                "photo.jpg",
                outputs=("out/*.jpg",),
            ),
        ),
    ),
    Case(
        CK,
        ".claude/skills/ai-multimodal",
        "scripts/requirements.txt, ffmpeg",
        (
            inv(
                'python scripts/media_optimizer.py --input "$WORK_DIR/inputs/clip.mp4"'
                ' --output "$OUTPUT_DIR/clip-small.mp4" --target-size 100MB',
                "clip.mp4",
                outputs=("out/*.mp4",),
            ),
        ),
    ),
    Case(
        CK,
        ".claude/skills/ui-styling",
        "python script, cwd output",
        (inv("python scripts/tailwind_config_gen.py --colors brand:blue --fonts display:Inter", outputs=("*.ts",)),),
    ),
)

#: Makes the inputs in a plain container of the image (reportlab, Pillow, ffmpeg are there).
MAKE_INPUTS = r"""
set -e
cd /in
python3 - <<'EOF'
import csv, io, json, tarfile
from reportlab.lib.pagesizes import letter
from reportlab.pdfgen import canvas
c = canvas.Canvas("doc.pdf", pagesize=letter)
c.drawString(72, 720, "Quarterly report: revenue grew 12 percent.")
c.drawString(72, 700, "Culture Index survey: pattern A high, B low, C medium, D low.")
c.showPage(); c.save()
with open("data.csv", "w", newline="") as f:
    w = csv.writer(f); w.writerow(["region", "units", "price", "score"])
    for i in range(60):
        w.writerow([["north", "south", "east"][i % 3], 10 + i, round(2.5 + i * 0.3, 2), (i * 7) % 11])
from PIL import Image, ImageDraw
im = Image.new("RGB", (1600, 1200), "steelblue"); ImageDraw.Draw(im).ellipse((300, 200, 1300, 1000), fill="orange")
im.save("photo.jpg", quality=90)
open("rule.yar", "w").write('rule Suspicious_Dropper {\n  meta:\n    author = "qa"\n    description = "test rule"\n'
    '    date = "2026-11-27"\n  strings:\n    $a = "cmd.exe /c powershell -enc" ascii\n    $b = { 4D 5A 90 00 03 }\n'
    '  condition:\n    uint16(0) == 0x5A4D and all of them\n}\n')
open("ct.c", "w").write('#include <string.h>\nint check(const unsigned char *a, const unsigned char *b, int n) {\n'
    '  for (int i = 0; i < n; i++) { if (a[i] != b[i]) return 0; }\n  return 1;\n}\n'
    'int main(void) { return check((const unsigned char *)"ab", (const unsigned char *)"ab", 2) ? 0 : 1; }\n')
open("page.html", "w").write('<!doctype html><html><head><title>World check</title>'
    '<script type="application/ld+json">{"@context": "https://schema.org", "@type": "Organization", '
    '"name": "Acme", "url": "https://acme.example"}</script></head>'
    '<body><h1>Hello from a file:// page</h1><button id="go">Go</button><input name="q"></body></html>')
json.dump({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"},
    {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}]}, open("policy.json", "w"))
open("refs.bib", "w").write('@article{smith2020,\n  title={A Study},\n  author={Smith, John and Doe, Jane},\n'
    '  journal={Nature},\n  year={2020},\n  volume={5},\n  pages={1--10}\n}\n\n'
    '@book{adams2018, title = {Another Book}, author = {Adams, Ann}, publisher = {Pub}, year = {2018}}\n')
with open("mols.csv", "w", newline="") as f:
    w = csv.writer(f); w.writerow(["smiles", "name"])
    for s, n in [("CCO", "ethanol"), ("CC(=O)Oc1ccccc1C(=O)O", "aspirin"), ("c1ccccc1", "benzene"),
                 ("CN1C=NC2=C1C(=O)N(C(=O)N2C)C", "caffeine")]:
        w.writerow([s, n])
def add(t, name, text):
    data = text.encode(); info = tarfile.TarInfo(name); info.size = len(data); t.addfile(info, io.BytesIO(data))
with tarfile.open("jsproj.tar.gz", "w:gz") as t:
    add(t, "jsproj/package.json", '{"name": "p", "private": true, "scripts": {"test": "node"}}\n')
    add(t, "jsproj/tests/a.test.js", 'console.log("a ok")\n')
    add(t, "jsproj/tests/b.test.js", 'require("fs").writeFileSync(".polluted", "x")\n')
    add(t, "jsproj/tests/c.test.js", 'console.log("c ok")\n')
EOF
ffmpeg -loglevel error -f lavfi -i testsrc=duration=3:size=640x360:rate=25 -pix_fmt yuv420p -y clip.mp4
"""


def make_inputs(image: str, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)  # read by the runs' user (uid 1000) in --plain
    user = f"{os.getuid()}:{os.getgid()}"
    docker = f"docker run --rm --network none -u {user} -e HOME=/tmp -v {folder}:/in {image}".split()
    subprocess.run([*docker, "bash", "-c", MAKE_INPUTS + "chmod a+r /in/*\n"], check=True)


def skill_name(folder: Path) -> str:
    match = re.search(r"^name:\s*['\"]?([^'\"\n]+?)['\"]?\s*$", (folder / "SKILL.md").read_text(), re.M)
    return match.group(1) if match else folder.name


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_service(image: str, data: Path, deps_from_docs: bool = True) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    empty = data / "no-skills"
    empty.mkdir(parents=True)
    env = dict(
        os.environ,
        SKILL_EXECUTOR_DOCKER_IMAGE=image,
        SKILL_EXECUTOR_SKILL_DEPS_FROM_DOCS="true" if deps_from_docs else "false",
        SKILL_EXECUTOR_MAX_TIMEOUT="600",
        PYTHONPATH=str(ROOT),
    )
    # pip and npm run as `nobody` when the service is root: a Python that user can run.
    if os.getuid() == 0:
        env.setdefault("SKILL_EXECUTOR_HOST_TOOLS_PYTHON", "/usr/bin/python3")
    log = open(data / "serve.log", "wb")  # noqa: SIM115 - the service's log for the run's length
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from skill_executor.cli.main import main; main()",
            "serve",
            "--port",
            str(port),
            "--runtime",
            "docker",
            "--skills-dir",
            str(empty),
            "--data-dir",
            str(data / "data"),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(240):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, url
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"serve exited: see {data / 'serve.log'}")
            time.sleep(0.5)
    raise SystemExit("serve did not start")


def short(text: str, n: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else "..." + text[-n:]


def run_service(args: argparse.Namespace, cases: list[Case], inputs: Path) -> list[dict[str, Any]]:
    data = Path(tempfile.mkdtemp(prefix="world-skills-"))
    data.chmod(0o755)  # pip and npm run as `nobody` when the service is root: they must reach envs/
    proc, url = start_service(args.image, data, deps_from_docs=not args.no_deps_from_docs)
    rows: list[dict[str, Any]] = []
    try:
        with Client(url, timeout=900) as client:
            file_ids = {p.name: client.upload_file(str(p)).id for p in sorted(inputs.iterdir())}
            # Every skill first: a skill's instructions may name a sibling (``../other``).
            names: dict[Case, str] = {}
            for case in cases:
                folder = Path(args.collections) / case.collection / case.path
                row = {"collection": case.collection, "skill": skill_name(folder), "pattern": case.pattern}
                try:
                    installed = client.push_skill(folder)
                    row |= {"install": "ok", "findings": [f.code for f in installed.findings or []]}
                    names[case] = row["skill"]
                except Exception as exc:  # noqa: BLE001 - recorded as the outcome
                    details = getattr(exc, "details", None)
                    row |= {"install": f"refused: {short(str(exc), 600)}", "details": details, "invocations": []}
                    print(json.dumps(row), flush=True)
                rows.append(row)
            for case, row in zip(cases, rows, strict=True):
                if case not in names:
                    continue
                name = names[case]
                try:
                    doc = client.skill_doctor(name)
                    row["doctor"] = {
                        "ok": doc.ok,
                        "missing": doc.missing.model_dump(mode="json", exclude_unset=True),
                        "network": doc.network.model_dump(mode="json", exclude_unset=True),
                    }
                except Exception as exc:  # noqa: BLE001
                    row["doctor"] = {"error": short(str(exc))}
                results = []
                for invocation in case.invocations:
                    request: dict[str, Any] = {
                        "skill": name,
                        "command": invocation.command,
                        "timeout": invocation.timeout,
                        "inputs": [{"file_id": file_ids[i], "to": f"work/inputs/{i}"} for i in invocation.inputs],
                        "outputs": {"globs": list(invocation.outputs), "inline": False},
                    }
                    if invocation.cwd:
                        request["cwd"] = invocation.cwd
                    started = time.monotonic()
                    try:
                        result = client.run(request)
                    except Exception as exc:  # noqa: BLE001
                        results.append({"command": invocation.command, "error": short(str(exc), 600)})
                        continue
                    results.append(
                        {
                            "command": invocation.command,
                            "exit_code": result.exit_code,
                            "timed_out": result.timed_out,
                            "seconds": round(time.monotonic() - started, 1),
                            "outputs": [(f.name, f.mime_type, f.size_bytes) for f in result.output_files or []],
                            "warnings": result.warnings or [],
                            "stdout": short(result.stdout, 400),
                            "stderr": short(result.stderr, 600),
                        }
                    )
                row["invocations"] = results
                print(json.dumps(row), flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if not args.keep:
            shutil.rmtree(data, ignore_errors=True)
    return rows


def run_plain(args: argparse.Namespace, cases: list[Case], inputs: Path) -> None:
    """Each invocation in a plain ``docker run --network none`` of the image, no service."""
    envs = f"-v {Path(args.envs).resolve()}:/opt/skill-envs:ro".split() if args.envs else []
    for case in cases:
        folder = Path(args.collections) / case.collection / case.path
        name = skill_name(folder)
        home = f"/workspace/skills/{name}"
        for invocation in case.invocations:
            # The skill copied in (writable, as a run's copy is); with --envs, a kept service's
            # resolved environments on the import paths (PYTHONPATH, NODE_PATH, ESM's node_modules).
            script = (
                "mkdir -p /workspace/work/inputs /workspace/out /workspace/skills && cp /in/* /workspace/work/inputs/"
                f" && cp -r /src {home}"
                " && for e in /opt/skill-envs/*/; do [ -d $e/python ] && PYTHONPATH=$PYTHONPATH:$e/python;"
                " [ -d $e/node/node_modules ] && NODE_PATH=$NODE_PATH:$e/node/node_modules"
                " && ln -sfn $e/node/node_modules /workspace/node_modules; done; true"
                f" && export SKILL_DIR={home} WORK_DIR=/workspace/work OUTPUT_DIR=/workspace/out"
                f" PYTHONPATH={home}:{home}/scripts$PYTHONPATH NODE_PATH=${{NODE_PATH#:}}:/usr/local/lib/node_modules"
                f" && cd {home} && {invocation.command}"
            )
            mounts = f"-v {folder.resolve()}:/src:ro -v {inputs}:/in:ro".split()
            plain = "docker run --rm --network none --tmpfs /workspace:uid=1000,gid=1000,exec -e HOME=/tmp".split()
            argv = [*plain, *mounts, *envs, args.image, "bash", "-c", script]
            print("$", " ".join(argv[:-1]), "'...'", "\n# command:", invocation.command, flush=True)
            done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
            print(f"exit {done.returncode}\n{done.stdout[-1500:]}{done.stderr[-2500:]}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collections", required=True, help="folder of <owner>+<name>/ checkouts")
    parser.add_argument(
        "--image", default=os.environ.get("SKILL_EXECUTOR_DOCKER_IMAGE", "skill-executor/runner:latest")
    )
    parser.add_argument("--only", nargs="*", help="skill folder names to run (default: all)")
    parser.add_argument("--plain", action="store_true", help="plain `docker run --network none`, no service")
    parser.add_argument("--envs", help="with --plain: a kept service's <data dir>/envs, for the skills' dependencies")
    parser.add_argument(
        "--no-deps-from-docs",
        action="store_true",
        help="the service's default: SKILL.md's pip install lines not resolved",
    )
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--keep", action="store_true", help="keep the service's temporary data dir")
    args = parser.parse_args()
    cases = [c for c in CASES if not args.only or Path(c.path).name in args.only]
    missing = [
        c.collection for c in cases if not (Path(args.collections) / c.collection / c.path / "SKILL.md").is_file()
    ]
    if missing:
        raise SystemExit(f"not in {args.collections}: {sorted(set(missing))}")
    inputs = Path(tempfile.mkdtemp(prefix="world-inputs-"))
    try:
        make_inputs(args.image, inputs)
        if args.plain:
            run_plain(args, cases, inputs)
            return
        rows = run_service(args, cases, inputs)
    finally:
        shutil.rmtree(inputs, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print("\n| skill | invocation | result | doctor |\n|---|---|---|---|")
    for row in rows:
        doctor = row.get("doctor", {})
        verdict = "ok" if doctor.get("ok") else f"missing {doctor.get('missing')}"
        if not row.get("invocations"):
            print(f"| {row['skill']} | (install) | {row['install']} | |")
        for r in row.get("invocations", []):
            result = (
                "ok" if r.get("exit_code") == 0 else f"exit {r.get('exit_code')}: {r.get('stderr') or r.get('error')}"
            )
            print(f"| {row['skill']} | `{r['command']}` | {result} | {verdict} |")


if __name__ == "__main__":
    main()
