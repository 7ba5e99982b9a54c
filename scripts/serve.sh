#!/usr/bin/env bash
# Set up everything on a fresh machine and start the service on its embedded defaults.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
ensure_venv
exec "$VENV/bin/skill-executor" skills list --root "$ROOT/skills" "$@"
