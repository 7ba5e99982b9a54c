#!/usr/bin/env bash
# Set up everything on a fresh machine and run the benchmark (bench/run.py): ours against
# the raw Docker floor, the cold-path alternatives, real workloads, the peers (llm-sandbox,
# AutoGen, epicbox: one virtualenv each, made by scripts/bench-peers.sh --prepare), on runc
# and (when gVisor's runsc can be registered with the engine) on runsc; one table with
# MET / NOT MET per target. `--quick` (no peers, no gVisor rows) finishes within 90 s.
# Results: a table on stdout and JSON in bench/results/latest.json (or --out FILE).
# `--soak [--runs N --concurrency C ...]` runs the soak benchmark instead (bench/soak.py:
# 2,000 runs at concurrency 8 by default, the cleanup backlog, before/after counts; exit
# status 1 on failed runs, leaks or missed backlog/drain targets).
# `--egress [--quick --no-sandbox --requests N ...]` runs the egress gateway's benchmark
# instead (bench/egress_latency.py: added latency p50/p99 through the gateway vs direct, HTTP
# and HTTPS kept alive, from the host and from a runc sandbox, requests/s; JSON on stdout).
# The full benchmark has it as its `egress` section too (skipped when the egress environment,
# requirements/egress-lock.txt, cannot be made).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
ensure_venv
trap stop_started_engine EXIT
ensure_engine
ensure_image >&2  # the build summary; stdout is the results (`--soak --json`)
if [[ "${1:-}" == "--soak" ]]; then
  shift
  if [[ " $* " == *" runsc "* || " $* " == *"=runsc "* ]] && ! ensure_runsc; then
    log "cannot soak on runsc: $RUNSC_PROBLEM"
    exit 1
  fi
  "$PY" bench/soak.py "$@"
  exit 0
fi
if ! ensure_egress_venv; then
  log "no egress rows: its environment (requirements/egress-lock.txt) could not be made"
fi
if [[ "${1:-}" == "--egress" ]]; then
  shift
  "$PY" bench/egress_latency.py "$@"
  exit 0
fi
if [[ " $* " != *" --quick "* && " $* " != *" --skip peers "* ]]; then
  "$ROOT/scripts/bench-peers.sh" --prepare >&2
fi
if ! ensure_runsc; then
  log "no runsc rows: $RUNSC_PROBLEM"
  export SKILL_EXECUTOR_BENCH_RUNSC_SKIP="$RUNSC_PROBLEM"
fi
"$PY" bench/run.py "$@"
