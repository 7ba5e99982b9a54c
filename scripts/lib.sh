#!/usr/bin/env bash
# Shared set-up steps for scripts/serve.sh and scripts/test.sh.
# Each step is idempotent: it does nothing when its result is already there.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SKILL_EXECUTOR_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"

log() { printf '[setup] %s\n' "$*" >&2; }

# Create the virtualenv and install the project (with test extras) when pyproject changed.
ensure_venv() {
  local stamp="$VENV/.installed" want
  want="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
  if [[ -x "$PY" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return 0
  fi
  log "creating virtualenv in $VENV"
  python3 -m venv "$VENV"
  "$PY" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  "$PY" -m pip install --quiet -e "$ROOT[test]"
  echo "$want" > "$stamp"
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
  apt_install docker.io debootstrap docker-compose || return 1
  if [[ -f /var/run/docker.pid ]]; then
    local old
    old=$(cat /var/run/docker.pid 2>/dev/null || true)
    if [[ -z "$old" ]] || ! kill -0 "$old" 2>/dev/null; then
      log "removing stale /var/run/docker.pid"
      rm -f /var/run/docker.pid
    fi
  fi
  log "starting dockerd (--bridge=none --iptables=false)"
  local logfile="${TMPDIR:-/tmp}/skill-executor-dockerd.log"
  setsid dockerd --bridge=none --iptables=false >"$logfile" 2>&1 < /dev/null &
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

# Build (or reuse) the runner image.
ensure_image() {
  ensure_tools
  "$VENV/bin/skill-executor" image build
}
