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
