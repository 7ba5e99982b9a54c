#!/usr/bin/env bash
# Set up everything on a fresh machine and run the benchmark (bench/run.py):
# ours against the raw Docker floor, side by side. `--quick` finishes within 60 s.
# Results: a table on stdout and JSON in bench/results/latest.json (or --out FILE).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
ensure_venv
trap stop_started_engine EXIT
ensure_engine
ensure_image
"$PY" bench/run.py "$@"
