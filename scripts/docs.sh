#!/usr/bin/env bash
# The docs site (MkDocs Material, mkdocs.yml): fully offline; the reference pages are
# generated from the code at every build (docs/_gen/hooks.py).
#   ./scripts/docs.sh build [DIR]   build --strict into DIR (default: site/); any warning fails
#   ./scripts/docs.sh serve         serve on 127.0.0.1:8000, rebuilding on changes
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/lib.sh"
ensure_venv
cd "$ROOT"
export NO_MKDOCS_2_WARNING=1
case "${1:-build}" in
  build) exec "$VENV/bin/mkdocs" build --strict --site-dir "${2:-site}" ;;
  serve) exec "$VENV/bin/mkdocs" serve --strict --dev-addr 127.0.0.1:8000 ;;
  *) echo "usage: $0 [build [DIR]|serve]" >&2; exit 2 ;;
esac
