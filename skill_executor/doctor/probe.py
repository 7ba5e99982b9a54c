"""The probe: one run in the sandbox that looks up the commands, Python modules, Node modules,
distributions and interpreter versions a skill uses, and its answer read as untrusted data
(:func:`parse_answer`)."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError

from ..access import Principal
from ..runs.models import RunRequest
from ..skills import Skill

if TYPE_CHECKING:
    from ..core import Executor
    from ..lifecycle import RunManager

#: Seconds the probe may take (capped by the server's maximum run timeout).
PROBE_TIMEOUT = 60.0

#: A command the probe did not check (no run could start).
NOT_CHECKED = ""
#: The most of the probe's output that is parsed (an answer is a few KiB per 100 names).
MAX_ANSWER_BYTES = 4 * 1024 * 1024
#: The finding of a probe that failed or answered something that is not an answer.
PROBE_FAILED = "doctor_probe_failed"

#: Looks for Node modules the way ``require`` would from the skill folder (NODE_PATH
#: included); a package whose entry point is not ``require``-able (ESM only, types only)
#: counts when its folder is on a lookup path.  Started from ``/``: the skill folder is
#: data (``dir`` on stdin), resolution only reads its ``package.json`` files.
NODE_PROBE = r"""
const fs = require('fs'), path = require('path'), Module = require('module');
let input = '';
process.stdin.on('data', d => input += d).on('end', () => {
  const {dir, names} = JSON.parse(input), found = {};
  const dirs = [...Module._nodeModulePaths(dir),
                ...(process.env.NODE_PATH || '').split(path.delimiter).filter(Boolean),
                ...(Module.globalPaths || [])];
  for (const name of names) {
    let ok = false;
    try { require.resolve(name, {paths: [dir]}); ok = true; } catch (e) {
      ok = dirs.some(d => fs.existsSync(path.join(d, name, 'package.json')));
    }
    found[name] = ok;
  }
  process.stdout.write(JSON.stringify(found));
});
"""

#: Runs in the sandbox as ``python3 -I -S`` with the names as JSON on stdin; prints one
#: JSON object.  Only the standard library and the image's site set-up run in it.
PROBE = r"""
import sys
sys.dont_write_bytecode = True
import importlib.util, json, os, shutil, site, subprocess
names = json.loads(sys.stdin.read(MAX_INPUT))
skill = os.getcwd()
out = {"commands": {}, "python": {}, "node": {}, "errors": [], "versions": {}}
if "python" in names.get("versions", []):
    import platform
    out["versions"]["python"] = platform.python_version()
if "node" in names.get("versions", []):
    node, out["versions"]["node"] = shutil.which("node"), None
    try:
        if node:
            done = subprocess.run([node, "--version"], cwd="/", capture_output=True, text=True, timeout=10)
            out["versions"]["node"] = done.stdout.strip().lstrip("v")[:40] if done.returncode == 0 else None
    except Exception:
        pass
for name in names["commands"]:
    out["commands"][name] = shutil.which(name)
site.main()  # the image's site-packages (-I: none of the user's, nothing of the skill)
sys.path[:0] = [skill, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
for name in names["python"]:
    try:  # a top-level name only: find_spec imports the parents of a dotted one
        out["python"][name] = name.isidentifier() and importlib.util.find_spec(name) is not None
    except Exception:
        out["python"][name] = False
import importlib.metadata
out["packages"] = {}
for name in names.get("packages", []):  # a distribution's name: its installed version, or None
    try:
        out["packages"][name] = importlib.metadata.version(name)
    except Exception:
        out["packages"][name] = None
if names["node"]:
    node = shutil.which("node")
    if node is None:
        out["errors"].append("node is not on PATH: no Node module can be loaded")
        out["node"] = {name: False for name in names["node"]}
    else:
        try:
            env = {k: os.environ[k] for k in ("PATH", "NODE_PATH") if k in os.environ}
            done = subprocess.run([node, "-e", names["node_probe"]], cwd="/", env=env,
                                  input=json.dumps({"dir": skill, "names": names["node"]}),
                                  capture_output=True, text=True, timeout=names["node_timeout"])
            found = json.loads(done.stdout[:MAX_INPUT])
            out["node"] = {name: found.get(name) is True for name in names["node"]}
        except Exception as exc:
            out["errors"].append(f"the Node probe failed: {type(exc).__name__}")
            out["node"] = {name: False for name in names["node"]}
print("\n" + json.dumps(out))
""".replace("MAX_INPUT", str(MAX_ANSWER_BYTES))


def run_probe(
    executor: Executor,
    runs: RunManager,
    skill: Skill,
    commands: list[str],
    python: list[str],
    node: list[str],
    packages: list[str],
    principal: Principal,
    versions: Sequence[str] = (),
) -> dict[str, Any]:
    timeout = min(PROBE_TIMEOUT, executor.settings.max_timeout)
    names = {
        "commands": commands,
        "python": python,
        "node": node,
        "packages": packages,
        "versions": list(versions),
        "node_probe": NODE_PROBE,
        "node_timeout": max(1.0, timeout * 0.8),
    }
    request = RunRequest(
        skill=skill.id, command=f"python3 -I -S -c {shlex.quote(PROBE)}", stdin=json.dumps(names), timeout=timeout
    )
    result = runs.run(request, principal=principal)
    if result.timed_out or result.exit_code != 0:
        why = "timed out" if result.timed_out else f"exit {result.exit_code}"
        stderr = printable(result.stderr.strip()[-500:])
        raise ProbeFailed(f"the probe of skill {skill.id!r} failed ({why}): {stderr or 'no output'}")
    answer = parse_answer(result.stdout, commands, python, node, packages, versions)
    if answer is None:
        raise ProbeFailed(f"the probe of skill {skill.id!r} gave no valid answer: nothing was checked")
    return answer


class ProbeFailed(Exception):
    """The probe gave no answer to trust (internal: :func:`diagnose` makes it a finding)."""


class _Answer(BaseModel):
    """What the probe prints, strictly: unknown fields, wrong types and over-long lists refused."""

    model_config = ConfigDict(extra="forbid", strict=True)
    commands: dict[StrictStr, StrictStr | None]
    python: dict[StrictStr, StrictBool]
    node: dict[StrictStr, StrictBool]
    packages: dict[StrictStr, StrictStr | None] = Field(default_factory=dict)
    errors: list[StrictStr] = Field(default_factory=list, max_length=10)
    versions: dict[StrictStr, StrictStr | None] = Field(default_factory=dict)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: An interpreter's version as the probe reports it (``3.11.2``, ``18.20.4``).
VERSION_TEXT = re.compile(r"[0-9][0-9A-Za-z.+-]{0,39}")


def printable(text: str) -> str:
    """One line without control characters (for a finding's message)."""
    return _CONTROL.sub("?", " ".join(text.split()))


def parse_answer(
    stdout: str,
    commands: list[str],
    python: list[str],
    node: list[str],
    packages: Sequence[str] = (),
    versions: Sequence[str] = (),
) -> dict[str, Any] | None:
    """The probe's answer from its output, or None: the output is over
    :data:`MAX_ANSWER_BYTES`, its last line is not the JSON object the probe prints, a value
    has the wrong type, a path is not a plain absolute path, or the names are not exactly
    the ones asked."""
    if len(stdout) > MAX_ANSWER_BYTES:
        return None
    lines = stdout.strip().splitlines()
    try:
        answer = _Answer.model_validate_json(lines[-1]) if lines else None
    except (ValidationError, ValueError):
        return None
    if answer is None or (
        set(answer.commands),
        set(answer.python),
        set(answer.node),
        set(answer.packages),
        set(answer.versions),
    ) != (set(commands), set(python), set(node), set(packages), set(versions)):
        return None
    if any(v is not None and not VERSION_TEXT.fullmatch(v) for v in answer.versions.values()):
        return None
    if any(v is not None and (len(v) > 200 or _CONTROL.search(v)) for v in answer.packages.values()):
        return None
    if any(
        path is not None and (not path.startswith("/") or len(path) > 4096 or _CONTROL.search(path))
        for path in answer.commands.values()
    ):
        return None
    return {
        "commands": answer.commands,
        "python": answer.python,
        "node": answer.node,
        "packages": answer.packages,
        "versions": answer.versions,
        "errors": [printable(e[:1000]) for e in answer.errors],
    }
