#!/usr/bin/env bash
# Set up everything on a fresh machine and run the whole test suite:
# virtualenv + project, a Docker engine (installed and started when none answers),
# gVisor's runsc registered with it as the runtime `runsc`, the runner image (built
# offline when no registry is available), the Postgres server binaries (the tests start
# their own servers), the npm tools of the MCP tests (tests/npmtools.py, into build/), then
# pytest. The container-hardening tests run on runc and on runsc. Debian's Chromium is installed
# for the browser tests (tests/browser.py).
# In CI (CI=true) a missing engine, runsc or Postgres is a failure; elsewhere those tests
# skip with the reason. The hard disk cap (a file system per workspace) needs root: without it
# the suite runs on the soft cap and says so (CI fails). Only an engine this script
# started is stopped at the end.
# Arguments go to pytest: `./scripts/test.sh -m unit` runs one tier (unit, engine,
# service, world; docs/guides/development.md). The tests run on 2 pytest-xdist workers
# (a test file per worker at a time): SKILL_EXECUTOR_TEST_WORKERS=N for N (1: one
# process); an explicit -n wins.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
ensure_venv
trap stop_started_engine EXIT
if ensure_engine; then
  ensure_image
  export SKILL_EXECUTOR_TEST_DOCKER=1
  if ! ensure_runsc; then
    if [[ "${CI:-}" == "true" ]]; then
      log "CI runs the hardening tests on gVisor too, but: $RUNSC_PROBLEM; failing"
      exit 1
    fi
    log "the gVisor (runsc) tests will be skipped: $RUNSC_PROBLEM"
    export SKILL_EXECUTOR_TEST_RUNSC_SKIP="$RUNSC_PROBLEM"
  fi
elif [[ "${CI:-}" == "true" ]]; then
  log "CI needs a Docker engine for the container tests; failing"
  exit 1
else
  log "no Docker engine: the Docker tests will be skipped"
  export SKILL_EXECUTOR_TEST_DOCKER=0
fi
if ! ensure_bwrap; then
  if [[ "${CI:-}" == "true" ]]; then
    log "CI runs the bwrap runtime's tests, but: $BWRAP_PROBLEM; failing"
    exit 1
  fi
  log "the bwrap runtime's tests will be skipped: $BWRAP_PROBLEM"
fi
if ! ensure_chromium; then
  if [[ "${CI:-}" == "true" ]]; then
    log "CI runs the browser tests (tests/service/test_content_safety.py), but: $CHROMIUM_PROBLEM; failing"
    exit 1
  fi
  log "the browser tests will be skipped: $CHROMIUM_PROBLEM"
fi
if ! ensure_disk_cap; then
  if [[ "${CI:-}" == "true" ]]; then
    log "CI runs on the hard disk cap, but: $DISK_CAP_PROBLEM; failing"
    exit 1
  fi
  log "the tests run on the soft disk cap (SKILL_EXECUTOR_DISK_CAP=soft): $DISK_CAP_PROBLEM"
  export SKILL_EXECUTOR_DISK_CAP=soft
fi
if ensure_postgres; then
  log "Postgres for the tests: $SKILL_EXECUTOR_PG_BIN"
elif [[ "${CI:-}" == "true" ]]; then
  log "CI runs the Postgres tests, but: $POSTGRES_PROBLEM; failing"
  exit 1
else
  log "the Postgres tests will be skipped: $POSTGRES_PROBLEM"
  export SKILL_EXECUTOR_TEST_POSTGRES_SKIP="$POSTGRES_PROBLEM"
fi
if ! ensure_npm_tools; then
  if [[ "${CI:-}" == "true" ]]; then
    log "CI runs the MCP conformance suite and Inspector, but: $NPM_TOOLS_PROBLEM; failing"
    exit 1
  fi
  log "the MCP conformance and Inspector tests will be skipped: $NPM_TOOLS_PROBLEM"
fi
if ! ensure_egress_venv; then
  [[ "${CI:-}" == "true" ]] && { log "CI runs the egress gateway's tests, but its environment could not be made; failing"; exit 1; }
  log "the egress gateway's tests will be skipped: its environment (requirements/egress-lock.txt) could not be made"
fi
"$ROOT/scripts/lint.sh"
"$PY" -m pytest $(xdist_args "$@") "$@"
