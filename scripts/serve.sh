#!/usr/bin/env bash
# Set up everything on a fresh machine and start the service on its embedded defaults:
# virtualenv + project, a Docker engine (installed and started when none answers; it
# keeps running after the service stops), gVisor's runsc registered with it when
# SKILL_EXECUTOR_DOCKER_OCI_RUNTIME=runsc, what the hard disk cap needs (root, loop
# devices, mkfs.ext4), the runner image, the egress gateway's environment when a policy
# rule has egress (SKILL_EXECUTOR_POLICY_FILE), then
# `skill-executor serve` on 127.0.0.1:8080 with skills from ./skills (read-only: never
# written), data in ./data and uploaded skills in ./data/skills.
# Arguments go to `skill-executor serve` (e.g. --port 9000, --runtime local).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
ensure_venv
ensure_host_tools_python
if policy_needs_egress && ! ensure_egress_venv; then
  log "a policy rule has egress, but the egress gateway's environment (requirements/egress-lock.txt) could not be made"
  exit 1
fi
if [[ " $* " != *" --runtime local "* && "${SKILL_EXECUTOR_RUNTIME:-docker}" != "local" ]]; then
  if ! ensure_engine; then
    log "no Docker engine: the service cannot run skills in containers here."
    log "For development without isolation: ./scripts/serve.sh --runtime local"
    exit 1
  fi
  if ! ensure_disk_cap; then
    log "$DISK_CAP_PROBLEM; run as root, or choose the soft (polled) cap: SKILL_EXECUTOR_DISK_CAP=soft"
    exit 1
  fi
  if [[ "${SKILL_EXECUTOR_DOCKER_OCI_RUNTIME:-}" == "runsc" ]] && ! ensure_runsc; then
    log "SKILL_EXECUTOR_DOCKER_OCI_RUNTIME=runsc, but: $RUNSC_PROBLEM"
    exit 1
  fi
  ensure_image
fi
exec "$VENV/bin/skill-executor" serve "$@"
