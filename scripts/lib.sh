#!/usr/bin/env bash
# Shared set-up steps for scripts/serve.sh and scripts/test.sh.
# Each step is idempotent: it does nothing when its result is already there.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SKILL_EXECUTOR_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"

log() { printf '[setup] %s\n' "$*" >&2; }

# Create the virtualenv and install the pinned environment (requirements/lock.txt, with
# hashes: exactly what CI tested; every extra, cluster, s3 and kubernetes included), then the project itself (editable, no dependencies),
# whenever pyproject.toml or the lock file changed. The pins move only by
# ./scripts/lock.sh, a reviewed commit.
ensure_venv() {
  local stamp="$VENV/.installed" want
  want="$(cat "$ROOT/pyproject.toml" "$ROOT/requirements/lock.txt" | sha256sum | cut -d' ' -f1)"
  if [[ -x "$PY" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return 0
  fi
  log "creating virtualenv in $VENV (requirements/lock.txt)"
  python3 -m venv "$VENV"
  "$PY" -m pip install --quiet --require-hashes --no-deps -r "$ROOT/requirements/lock.txt"
  # A stale build's metadata in the source tree (git-ignored) would shadow the new one's
  # entry points (the package was renamed executor -> skill_executor).
  rm -rf "$ROOT"/*.egg-info
  "$PY" -m pip install --quiet --no-deps --no-build-isolation -e "$ROOT"
  "$PY" -m pip check >/dev/null || { "$PY" -m pip check >&2; log "the locked environment is inconsistent"; return 1; }
  echo "$want" > "$stamp"
}

# The egress gateway's environment (skill_executor/egress runs mitmproxy there, in a process of
# its own): requirements/egress-lock.txt, hashed, in $EGRESS_VENV, reinstalled when the lock
# changes. Exports SKILL_EXECUTOR_EGRESS_PYTHON (unless set), or returns non-zero.
EGRESS_VENV="${SKILL_EXECUTOR_EGRESS_VENV:-$ROOT/.venv-egress}"
ensure_egress_venv() {
  [[ -n "${SKILL_EXECUTOR_EGRESS_PYTHON:-}" ]] && return 0
  local stamp="$EGRESS_VENV/.installed" want
  want="$(sha256sum < "$ROOT/requirements/egress-lock.txt" | cut -d' ' -f1)"
  if ! [[ -x "$EGRESS_VENV/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    log "creating the egress gateway's virtualenv in $EGRESS_VENV (requirements/egress-lock.txt)"
    python3 -m venv "$EGRESS_VENV" || return 1
    "$EGRESS_VENV/bin/python" -m pip install --quiet --require-hashes --no-deps -r "$ROOT/requirements/egress-lock.txt" || return 1
    echo "$want" > "$stamp"
  fi
  export SKILL_EXECUTOR_EGRESS_PYTHON="$EGRESS_VENV/bin/python"
}

# Whether SKILL_EXECUTOR_POLICY_FILE has a rule with `egress` (then the service starts the
# egress gateway, which needs its environment). A policy that cannot be read answers yes:
# the service itself then refuses to start with the file's exact problem.
policy_needs_egress() {
  [[ -n "${SKILL_EXECUTOR_POLICY_FILE:-}" ]] || return 1
  "$PY" -P - <<'PYEOF'
import sys
from skill_executor.config import Settings
from skill_executor.errors import ExecutorError
from skill_executor.policy.loading import policy_of
try:
    policy = policy_of(Settings())
except ExecutorError:
    sys.exit(0)
sys.exit(0 if policy is not None and any(rule.egress is not None for rule in policy.rules) else 1)
PYEOF
}

# Dependency resolution runs pip as SKILL_EXECUTOR_HOST_TOOLS_USER (nobody) when the service is
# root. A virtualenv whose Python lives under /root (pyenv) cannot be run by that user: then
# pip runs from Debian's /usr/bin/python3 (python3-pip installed when missing), said here.
ensure_host_tools_python() {
  [[ $(id -u) -eq 0 && -z "${SKILL_EXECUTOR_HOST_TOOLS_PYTHON:-}" ]] || return 0
  local user="${SKILL_EXECUTOR_HOST_TOOLS_USER:-nobody}"
  [[ "$user" != "root" ]] || return 0
  if runuser -u "$user" -- "$PY" -I -c '' 2>/dev/null; then
    return 0
  fi
  /usr/bin/python3 -I -m pip --version >/dev/null 2>&1 || apt_install python3-pip || return 0
  export SKILL_EXECUTOR_HOST_TOOLS_PYTHON=/usr/bin/python3
  log "$user cannot run $PY: skills' Python dependencies resolve with /usr/bin/python3's pip (SKILL_EXECUTOR_HOST_TOOLS_PYTHON)"
}

# The Debian client speaks the engine's API version; a newer client may refuse it.
docker_cli() {
  if [[ -x /usr/bin/docker ]]; then /usr/bin/docker "$@"; else docker "$@"; fi
}

engine_answers() {
  [[ -S /var/run/docker.sock ]] && timeout 10 "$PY" - <<'PYEOF' >/dev/null 2>&1
import docker
docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto", timeout=5).ping()
PYEOF
}

APT_UPDATED=0
apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  ((${#missing[@]})) || return 0
  if [[ $(id -u) -ne 0 ]]; then
    log "cannot install ${missing[*]}: not root"
    return 1
  fi
  if ((APT_UPDATED == 0)); then
    log "apt-get update"
    apt-get update -qq >/dev/null
    APT_UPDATED=1
  fi
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Set to the pid of the engine this script started (0: none), so only that one is stopped.
STARTED_ENGINE_PID=0

# Make sure a Docker engine answers: install docker.io and start dockerd when none does.
# Returns non-zero (with a logged reason) when that is impossible here.
ensure_engine() {
  if engine_answers; then
    return 0
  fi
  if [[ $(id -u) -ne 0 ]]; then
    log "no Docker engine answers and this user cannot start one (not root)"
    return 1
  fi
  apt_install docker.io debootstrap docker-compose runsc || return 1
  if [[ -f /var/run/docker.pid ]]; then
    local old
    old=$(cat /var/run/docker.pid 2>/dev/null || true)
    if [[ -z "$old" ]] || ! kill -0 "$old" 2>/dev/null; then
      log "removing stale /var/run/docker.pid"
      rm -f /var/run/docker.pid
    fi
  fi
  # Its own config file: the operator's /etc/docker/daemon.json (if any, left untouched)
  # plus the gVisor runtime, no bridge and no iptables rules.
  mkdir -p "$ENGINE_DIR"
  local config="$ENGINE_DIR/daemon.json"
  engine_config "$(etc_daemon_json)" "$config" '{"bridge": "none", "iptables": false}' || return 1
  log "starting dockerd (--config-file $config: no bridge, no iptables, runtime runsc)"
  local logfile="${TMPDIR:-/tmp}/skill-executor-dockerd.log"
  setsid dockerd --config-file "$config" >"$logfile" 2>&1 < /dev/null &
  STARTED_ENGINE_PID=$!
  for _ in $(seq 1 120); do
    if engine_answers; then
      log "dockerd is up (pid $STARTED_ENGINE_PID)"
      return 0
    fi
    if ! kill -0 "$STARTED_ENGINE_PID" 2>/dev/null; then
      log "dockerd exited; last lines of $logfile:"
      tail -20 "$logfile" >&2
      STARTED_ENGINE_PID=0
      return 1
    fi
    sleep 0.5
  done
  log "dockerd did not answer within 60 s"
  return 1
}

# Where this script keeps the config file of an engine it starts.
ENGINE_DIR="${SKILL_EXECUTOR_ENGINE_DIR:-$ROOT/build/engine}"

# The operator's engine config file, if there is one.
etc_daemon_json() {
  if [[ -f /etc/docker/daemon.json ]]; then echo /etc/docker/daemon.json; fi
}

# engine_config IN OUT [EXTRA_JSON]: write to OUT the engine config IN (a file, or "" for
# none) with the `runsc` runtime (gVisor) registered with the arguments the executor needs
# (skill_executor/runtimes/docker/oci.py RUNSC_ARGS; an existing entry keeps its path, its other
# arguments and its --platform; its --host-uds becomes RUNSC_ARGS' `all`, which holds both
# `create` and `open`), and EXTRA_JSON's keys set. Written atomically; IN is only read
# (unless it is OUT).
engine_config() {
  local extra="${3:-}"
  "$PY" -P - "$1" "$2" "${extra:-"{}"}" <<'PYEOF'
import json, os, shutil, sys, tempfile
from skill_executor.runtimes.docker.oci import RUNSC_ARGS
source, target, extra = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
config = {}
if source:
    with open(source) as f:
        text = f.read().strip()
    config = json.loads(text) if text else {}
entry = config.setdefault("runtimes", {}).setdefault("runsc", {})
entry.setdefault("path", shutil.which("runsc") or "/usr/bin/runsc")
args = list(entry.get("runtimeArgs") or [])
key = lambda arg: arg.split("=", 1)[0]
for want in RUNSC_ARGS:
    same = [a for a in args if key(a) == key(want)]
    if key(want) == "--platform" and same:
        continue
    if not same:
        args.append(want)
    else:  # replaced where it stood
        args = [want if a == same[0] else a for a in args if key(a) != key(want) or a == same[0]]
entry["runtimeArgs"] = args
config.update(extra)
folder = os.path.dirname(os.path.abspath(target))
fd, tmp = tempfile.mkstemp(dir=folder, prefix=".daemon.json.")
with os.fdopen(fd, "w") as f:
    json.dump(config, f, indent=2)
    f.write("\n")
if os.path.exists(target):
    os.chmod(tmp, os.stat(target).st_mode & 0o777)
else:
    os.chmod(tmp, 0o644)
os.replace(tmp, target)
PYEOF
}

# Why the engine cannot run containers on gVisor as the executor needs it (empty: it can).
runsc_problem() {
  "$PY" -P - <<'PYEOF' 2>&1
import docker
from skill_executor.errors import ExecutorError
from skill_executor.runtimes.docker.oci import check_oci_runtime
client = docker.DockerClient(base_url="unix:///var/run/docker.sock", version="auto", timeout=10)
try:
    runtime = check_oci_runtime("runsc", client.info(), pool=True)
except ExecutorError as exc:
    print(exc.message)
else:
    if not runtime.opens_host_sockets:  # an older registration (create): egress runs are refused
        print(f"runsc is registered without --host-uds=all (it has: {' '.join(runtime.args)}): "
              "runs with egress cannot reach the gateway's socket")
PYEOF
}

# What the hard disk cap (SKILL_EXECUTOR_DISK_CAP=hard, the default: a file system per
# workspace) needs from this machine: root, loop devices, mkfs.ext4 (e2fsprogs, installed
# when missing). The service itself checks the rest at start-up (a test volume made,
# filled and removed) and refuses to start without it. Returns non-zero with the reason
# in DISK_CAP_PROBLEM; nothing to do when SKILL_EXECUTOR_DISK_CAP=soft.
DISK_CAP_PROBLEM=""
ensure_disk_cap() {
  DISK_CAP_PROBLEM=""
  [[ "${SKILL_EXECUTOR_DISK_CAP:-hard}" == "soft" ]] && return 0
  if [[ $(id -u) -ne 0 ]]; then
    DISK_CAP_PROBLEM="the hard disk cap needs root (loop devices and mounts)"
    return 1
  fi
  if ! PATH="$PATH:/usr/sbin:/sbin" command -v mkfs.ext4 >/dev/null && ! apt_install e2fsprogs; then
    DISK_CAP_PROBLEM="the hard disk cap needs mkfs.ext4 (Debian package e2fsprogs)"
    return 1
  fi
  [[ -e /dev/loop-control ]] || modprobe loop 2>/dev/null || true
  if [[ ! -e /dev/loop-control ]]; then
    DISK_CAP_PROBLEM="the hard disk cap needs loop devices (/dev/loop-control is missing)"
    return 1
  fi
}

# The Postgres server binaries the Postgres tests start (tests/pgserver.py: initdb into a
# temporary folder, a server on a free 127.0.0.1 port): Debian's postgresql, installed
# when no /usr/lib/postgresql/*/bin/initdb exists. A fresh install creates no cluster and
# starts no server (a drop-in in /etc/postgresql-common/createcluster.d says so). Exports
# SKILL_EXECUTOR_PG_BIN (the newest bin folder, unless already set), or returns non-zero with the reason in
# POSTGRES_PROBLEM.
POSTGRES_PROBLEM=""
pg_bin_dir() {
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -1)
  [[ -n "$found" ]] && dirname "$found"
}
ensure_postgres() {
  POSTGRES_PROBLEM=""
  local bin
  if [[ -n "${SKILL_EXECUTOR_PG_BIN:-}" ]]; then  # chosen by the caller: used as it is
    [[ -x "$SKILL_EXECUTOR_PG_BIN/initdb" ]] && return 0
    POSTGRES_PROBLEM="SKILL_EXECUTOR_PG_BIN=$SKILL_EXECUTOR_PG_BIN has no initdb"
    return 1
  fi
  bin=$(pg_bin_dir || true)
  if [[ -z "$bin" ]]; then
    if [[ $(id -u) -eq 0 && ! -e /etc/postgresql-common/createcluster.conf ]]; then
      mkdir -p /etc/postgresql-common/createcluster.d
      printf '# skill-executor (scripts/lib.sh): the tests start their own servers\ncreate_main_cluster = false\n' \
        > /etc/postgresql-common/createcluster.d/skill-executor.conf
    fi
    apt_install postgresql || true
    bin=$(pg_bin_dir || true)
  fi
  if [[ -z "$bin" ]]; then
    POSTGRES_PROBLEM="the Postgres server binaries are not installed and could not be installed (Debian package postgresql)"
    return 1
  fi
  if [[ $(id -u) -eq 0 ]] && ! id -u postgres >/dev/null 2>&1; then
    POSTGRES_PROBLEM="running as root, the Postgres tests run the server as the 'postgres' system user, which does not exist"
    return 1
  fi
  export SKILL_EXECUTOR_PG_BIN="$bin"
}

# Make the engine's `runsc` runtime (gVisor) usable: install Debian's runsc package, and
# register the runtime with a running engine that lacks it (root only: merge it into the
# engine's config file, keeping a backup, and reload the engine with SIGHUP -- running
# containers are not touched). Returns non-zero with the reason in RUNSC_PROBLEM.
RUNSC_PROBLEM=""
# bubblewrap for the bwrap runtime's tests (Debian's bubblewrap); BWRAP_PROBLEM says why not.
ensure_bwrap() {
  BWRAP_PROBLEM=""
  if ! command -v bwrap >/dev/null && ! apt_install bubblewrap; then
    BWRAP_PROBLEM="bubblewrap's bwrap is not installed and could not be installed (Debian package bubblewrap)"
    return 1
  fi
  # The runtime compiles the launcher (its exec supervisor) with the host's cc, statically.
  if { ! command -v cc >/dev/null || [[ ! -f /usr/lib/x86_64-linux-gnu/libc.a && ! -f /usr/lib/aarch64-linux-gnu/libc.a ]]; } \
    && ! apt_install gcc libc6-dev; then
    BWRAP_PROBLEM="no C compiler for the bwrap runtime's launcher (Debian packages gcc, libc6-dev)"
    return 1
  fi
  local said
  if ! said=$(bwrap --unshare-user --unshare-pid --unshare-net --ro-bind / / true 2>&1); then
    BWRAP_PROBLEM="bwrap cannot make a sandbox here (user namespaces?): $said"
    return 1
  fi
}

# Debian's Chromium for the browser tests (tests/browser.py: a page opened from the service
# runs no script; driven over the DevTools protocol, no browser download).
ensure_chromium() {
  CHROMIUM_PROBLEM=""
  if ! command -v chromium >/dev/null && ! apt_install chromium; then
    CHROMIUM_PROBLEM="Chromium is not installed and could not be installed (Debian package chromium)"
    return 1
  fi
}

ensure_runsc() {
  RUNSC_PROBLEM=""
  if ! command -v runsc >/dev/null && ! apt_install runsc; then
    RUNSC_PROBLEM="gVisor's runsc is not installed and could not be installed (Debian package runsc)"
    return 1
  fi
  local problem
  problem=$(runsc_problem)
  [[ -z "$problem" ]] && return 0
  if [[ $(id -u) -ne 0 ]]; then
    RUNSC_PROBLEM="$problem (this user cannot register it: not root)"
    return 1
  fi
  local pid config
  pid=$(cat /var/run/docker.pid 2>/dev/null || true)
  if [[ -z "$pid" || "$(cat "/proc/$pid/comm" 2>/dev/null)" != "dockerd" ]]; then
    RUNSC_PROBLEM="$problem (no dockerd process found through /var/run/docker.pid to reload)"
    return 1
  fi
  # The engine's config file: its --config-file, else the default.
  config=$(tr '\0' '\n' < "/proc/$pid/cmdline" | sed -n 's/^--config-file=//p; /^--config-file$/{n;p}' | tail -1)
  config="${config:-/etc/docker/daemon.json}"
  if [[ -f "$config" && ! -f "$config.skill-executor.bak" ]]; then cp -p "$config" "$config.skill-executor.bak"; fi
  mkdir -p "$(dirname "$config")"
  log "registering runsc in $config and reloading dockerd (pid $pid, SIGHUP): $problem"
  if ! engine_config "$([[ -f "$config" ]] && echo "$config")" "$config"; then
    RUNSC_PROBLEM="$problem (could not merge runsc into $config)"
    return 1
  fi
  kill -HUP "$pid"
  for _ in $(seq 1 20); do
    problem=$(runsc_problem)
    [[ -z "$problem" ]] && { log "runsc registered: $(docker_cli info --format '{{json .Runtimes.runsc}}' 2>/dev/null)"; return 0; }
    sleep 0.5
  done
  RUNSC_PROBLEM="$problem (still, after registering it in $config and reloading dockerd)"
  return 1
}

# ensure_second_engine ROOT [IMAGE...]: a second Docker engine beside the main one, for
# workers that each own an engine (tests/engines.py: its own dockerd, --data-root,
# --exec-root, --pidfile and unix socket; no bridge, no iptables; runsc registered), started
# when it is not running and left running (stop_second_engine ROOT stops it), with each
# IMAGE copied from the main engine unless already there. Exports SECOND_DOCKER_HOST, or
# returns non-zero with the reason logged.
SECOND_DOCKER_HOST=""
ensure_second_engine() {
  local root="$1" out; shift
  out=$(cd "$ROOT" && "$PY" -m tests.engines up --root "$root" "${@/#/--image=}") || return 1
  SECOND_DOCKER_HOST=$("$PY" -P -c 'import json, sys; print(json.loads(sys.argv[1])["docker_host"])' "$out")
  export SECOND_DOCKER_HOST
  log "second Docker engine at $SECOND_DOCKER_HOST ($root)"
}

stop_second_engine() {
  (cd "$ROOT" && "$PY" -m tests.engines down --root "$1" >/dev/null)
}

stop_started_engine() {
  if ((STARTED_ENGINE_PID > 0)) && kill -0 "$STARTED_ENGINE_PID" 2>/dev/null; then
    log "stopping the dockerd this script started (pid $STARTED_ENGINE_PID)"
    kill "$STARTED_ENGINE_PID" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$STARTED_ENGINE_PID" 2>/dev/null || break; sleep 0.5; done
  fi
}

# Tools the image build (debootstrap, offline; npm, for the runner's npm packages,
# fetched on the host) and the compose tests (docker-compose) need, whether or not an
# engine was already running. Without root, whatever is missing stays missing and the
# step that needs it says so.
ensure_tools() {
  local missing=()
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  command -v npm >/dev/null || missing+=(npm)
  command -v docker-compose >/dev/null || missing+=(docker-compose)
  ((${#missing[@]})) || return 0
  apt_install "${missing[@]}" || log "could not install ${missing[*]}"
}

# The npm tools the MCP tests run (tests/npm: the official conformance suite, the MCP
# Inspector, Node.js 22), installed once from the lock into build/npm-tools/ (npm ci, no
# install scripts) and used offline afterwards (tests/npmtools.py). Sets NPM_TOOLS_PROBLEM
# and returns non-zero when they cannot be installed.
NPM_TOOLS_PROBLEM=""
ensure_npm_tools() {
  local out
  if out=$(cd "$ROOT" && "$PY" -m tests.npmtools install 2>&1); then
    log "npm test tools in $out"
    return 0
  fi
  NPM_TOOLS_PROBLEM="$out"
  return 1
}

# Build (or reuse) the runner image.
# The runs then use the image by its hash tag (unless SKILL_EXECUTOR_DOCKER_IMAGE is set):
# on an engine shared with other checkouts, :latest may be retagged while the tests run.
ensure_image() {
  ensure_tools
  local built
  built="$("$VENV/bin/skill-executor" image build)" || return 1
  echo "$built"
  # The Python 3.13 tier (Debian trixie): skills whose requires-python 3.11 does not meet
  # run there (SKILL_EXECUTOR_PYTHON_TIER_IMAGES); reused when up to date, like the above.
  "$VENV/bin/skill-executor" image build --flavour python3.13 || return 1
  if [[ -z "${SKILL_EXECUTOR_DOCKER_IMAGE:-}" ]]; then
    SKILL_EXECUTOR_DOCKER_IMAGE="$("$PY" -P -c 'import json, sys; print(json.loads(sys.argv[1])["tag"])' "$built")"
    export SKILL_EXECUTOR_DOCKER_IMAGE
  fi
}

# The pytest-xdist arguments for SKILL_EXECUTOR_TEST_WORKERS (N workers, "auto" for one per
# core; 1: one process), default 2 (the whole suite in about half the time on 2 cores,
# docs/guides/development.md), unless the arguments given already choose (-n,
# --numprocesses, -p no:xdist). --dist loadfile: a test file stays on one worker, so its
# module fixtures (a server, a built site) are made once.
xdist_args() {
  local workers="${SKILL_EXECUTOR_TEST_WORKERS:-2}" arg
  [[ "$workers" == "1" || "$workers" == "0" ]] && return 0
  for arg in "$@"; do
    case "$arg" in -n|-n[0-9]*|-nauto|--numprocesses|--numprocesses=*|no:xdist) return 0 ;; esac
  done
  echo "-n $workers --dist loadfile"
}
