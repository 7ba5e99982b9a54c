#!/usr/bin/env bash
# Set up everything on a fresh machine and run the whole test suite.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
ensure_venv
exec "$PY" -m pytest "$@"
