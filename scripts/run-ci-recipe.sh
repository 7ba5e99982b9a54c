#!/usr/bin/env bash
# Run the `run:` steps of a GitHub Actions workflow's first job here, the way a runner
# does: run-ci-recipe.sh RECIPE.yml [WORKDIR]
#
# * each step is its own `bash --noprofile --norc -eo pipefail` process, started in
#   WORKDIR (default: the current folder; a step's `working-directory` is relative to it);
# * environment: this process's, then what earlier steps appended to $GITHUB_ENV
#   (NAME=value or NAME<<DELIMITER lines; GITHUB_* and RUNNER_* names are refused, as
#   on GitHub) and $GITHUB_PATH, then the workflow's, the job's and the step's `env:`;
#   CI, GITHUB_ACTIONS, GITHUB_WORKSPACE, GITHUB_ENV, GITHUB_PATH, GITHUB_OUTPUT,
#   GITHUB_STEP_SUMMARY (kept when already set, so a caller can read it) and RUNNER_TEMP
#   are set;
# * `if:` understands success() (the default), always(), failure(), cancelled() and
#   !cancelled(); `continue-on-error: true` and `timeout-minutes` are honoured;
# * `${{ env.NAME }}`, `${{ github.workspace }}` and `${{ runner.temp }}` are expanded;
#   any other expression is an error;
# * `uses:` steps are skipped with a log line (check-outs, set-up and publishing actions).
#
# Exit status: the first failing step's (after the if: always() steps have run), 0 when
# every step passed, 2 when the recipe cannot be run. PyYAML is needed: ${PYTHON:-python3}.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: run-ci-recipe.sh RECIPE.yml [WORKDIR]" >&2
  exit 2
fi

exec "${PYTHON:-python3}" - "$@" <<'PYEOF'
import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import yaml
except ImportError:
    sys.exit(print("run-ci-recipe: PyYAML is missing (set PYTHON to an interpreter that has it)", file=sys.stderr) or 2)


def log(message):
    print(f"[ci-recipe] {message}", file=sys.stderr, flush=True)


def fail(message):
    log(message)
    sys.exit(2)


recipe = Path(sys.argv[1])
workdir = Path(sys.argv[2] if len(sys.argv) > 2 else ".").resolve()
if not workdir.is_dir():
    fail(f"{workdir} is not a folder")
try:
    workflow = yaml.safe_load(recipe.read_text(encoding="utf-8"))
except (OSError, yaml.YAMLError) as exc:
    fail(f"cannot read {recipe}: {exc}")
jobs = workflow.get("jobs") if isinstance(workflow, dict) else None
if not isinstance(jobs, dict) or not jobs:
    fail(f"{recipe} has no jobs")
job_id, job = next(iter(jobs.items()))
for key in ("strategy", "container", "services"):
    if key in job:
        fail(f"job {job_id}: {key!r} is not supported here")
defaults = {**(workflow.get("defaults") or {}).get("run", {}), **(job.get("defaults") or {}).get("run", {})}

temp = Path(tempfile.mkdtemp(prefix="ci-recipe-"))
atexit.register(shutil.rmtree, temp, ignore_errors=True)
files = {name: temp / name.lower() for name in ("GITHUB_ENV", "GITHUB_PATH", "GITHUB_OUTPUT")}
for path in files.values():
    path.touch()
summary = os.environ.get("GITHUB_STEP_SUMMARY") or str(temp / "step_summary.md")
base = {**os.environ, "CI": "true", "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(workdir),
        "RUNNER_TEMP": str(temp), "GITHUB_STEP_SUMMARY": summary, **{k: str(v) for k, v in files.items()}}


def read_env_file(path):
    """NAME=value and NAME<<DELIMITER ... DELIMITER lines, as GitHub reads them."""
    values, lines = {}, path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if not line.strip():
            continue
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            body = []
            while index < len(lines) and lines[index] != delimiter:
                body.append(lines[index])
                index += 1
            if index == len(lines):
                fail(f"GITHUB_ENV: no closing {delimiter!r} for {name}")
            index += 1
            values[name] = "\n".join(body)
        elif "=" in line:
            name, value = line.split("=", 1)
            values[name] = value
        else:
            fail(f"GITHUB_ENV: invalid line {line!r}")
    for name in list(values):
        if name.upper().startswith(("GITHUB_", "RUNNER_")):
            log(f"GITHUB_ENV may not set {name}; ignored")
            del values[name]
    return values


def expand(text, env):
    def one(match):
        expr = match.group(1).strip()
        if expr.startswith("env."):
            return env.get(expr[4:], "")
        if expr == "github.workspace":
            return str(workdir)
        if expr == "runner.temp":
            return str(temp)
        fail(f"unsupported expression ${{{{ {expr} }}}}")
    return re.sub(r"\$\{\{(.*?)\}\}", one, str(text))


def wanted(condition, failed):
    if condition is None:
        return not failed
    expr = str(condition).strip()
    expr = re.sub(r"^\$\{\{(.*)\}\}$", r"\1", expr).strip()
    table = {"always()": True, "success()": not failed, "failure()": failed,
             "cancelled()": False, "!cancelled()": True}
    if expr not in table:
        fail(f"unsupported if: {condition!r}")
    return table[expr]


def environment(step):
    env = dict(base)
    extra = [line for line in files["GITHUB_PATH"].read_text(encoding="utf-8").splitlines() if line.strip()]
    if extra:
        env["PATH"] = os.pathsep.join([*reversed(extra), env.get("PATH", "")])
    env.update(read_env_file(files["GITHUB_ENV"]))
    for scope in (workflow.get("env"), job.get("env"), step.get("env")):
        for name, value in (scope or {}).items():
            env[str(name)] = expand(value, env)
    return env


def run(step, env, number):
    shell = step.get("shell", defaults.get("shell", "bash"))
    if shell != "bash":
        fail(f"step {number}: shell {shell!r} is not supported (bash only)")
    cwd = workdir / expand(step.get("working-directory", defaults.get("working-directory", ".")), env)
    script = temp / f"step-{number}.sh"
    script.write_text(expand(step["run"], env) + "\n", encoding="utf-8")
    minutes = step.get("timeout-minutes")
    proc = subprocess.Popen(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                            cwd=cwd, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        return proc.wait(timeout=float(minutes) * 60 if minutes else None)
    except subprocess.TimeoutExpired:
        log(f"step {number} timed out after {minutes} minutes")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return 124


steps = job.get("steps") or []
status = 0
for number, step in enumerate(steps, 1):
    name = step.get("name") or step.get("uses") or str(step.get("run", "")).splitlines()[0]
    if not wanted(step.get("if"), status != 0):
        log(f"step {number}/{len(steps)} skipped (if: {step.get('if', 'success()')}): {name}")
        continue
    if "uses" in step:
        log(f"step {number}/{len(steps)} skipped (uses: {step['uses']}): {name}")
        continue
    if "run" not in step:
        fail(f"step {number} has neither run nor uses")
    log(f"step {number}/{len(steps)}: {name}")
    started = time.monotonic()
    code = run(step, environment(step), number)
    took = time.monotonic() - started
    if code == 0:
        log(f"step {number} passed ({took:.1f}s)")
    elif step.get("continue-on-error") is True:
        log(f"step {number} failed with exit status {code} ({took:.1f}s); continue-on-error")
    else:
        log(f"step {number} failed with exit status {code} ({took:.1f}s)")
        status = status or code
log(f"job {job_id}: {'passed' if status == 0 else f'failed (exit status {status})'}")
sys.exit(status)
PYEOF
