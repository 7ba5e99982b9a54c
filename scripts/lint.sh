#!/usr/bin/env bash
# Lint and type-check the package: ruff (pyproject's [tool.ruff]) and mypy --strict
# (pyproject's [tool.mypy]). Called by scripts/test.sh before the tests; runs alone too.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
ensure_venv
log "ruff"
"$VENV/bin/ruff" format --check skill_executor client tests bench docs/_gen
"$VENV/bin/ruff" check skill_executor client
"$VENV/bin/ruff" check --select F tests bench  # tests: errors only (long literal lines are fine there)
log "mypy --strict"
"$VENV/bin/mypy" skill_executor
"$VENV/bin/mypy" client/skill_executor_client client/generate.py  # the typed client (its own distribution)
