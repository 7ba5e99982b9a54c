#!/usr/bin/env bash
# Benchmark skill-executor next to its peers (bench/peers.py): llm-sandbox (with and without
# its container pool), AutoGen's DockerCommandLineCodeExecutor and epicbox, each running `true`
# on the same engine with our runner image. Creates one virtualenv per peer under
# build/bench-peers/<peer>/ (reused when present) and pip-installs the peer from PyPI.
# Arguments go to bench/peers.py (--samples N, --throughput-runs N, --out FILE); with
# --prepare it only makes the virtualenvs (./scripts/bench.sh does, for its peer rows).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
ensure_venv
trap stop_started_engine EXIT
ensure_engine
ensure_image >&2  # exports SKILL_EXECUTOR_DOCKER_IMAGE (the tag of this tree's image)

PEERS_DIR="$ROOT/build/bench-peers"
# peer folder -> pip requirements (epicbox 1.1.0 passes urllib3 1.x's `method_whitelist`)
declare -A REQUIREMENTS=(
  [llm-sandbox]="llm-sandbox[docker]"
  [autogen]="autogen-ext[docker] autogen-core"
  [epicbox]="epicbox urllib3<2"
)
for peer in "${!REQUIREMENTS[@]}"; do
  venv="$PEERS_DIR/$peer"
  if [[ -x "$venv/bin/python" && -f "$venv/.installed" ]]; then
    continue
  fi
  log "creating the $peer virtualenv in $venv"
  python3 -m venv "$venv"
  # shellcheck disable=SC2086 -- the requirements are a word list
  "$venv/bin/python" -m pip install --quiet ${REQUIREMENTS[$peer]}
  touch "$venv/.installed"
done
if [[ "${1:-}" == "--prepare" ]]; then
  exit 0
fi
"$PY" bench/peers.py "$@"
