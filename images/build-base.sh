#!/usr/bin/env bash
# Build the runner's base image without a registry: a minimal Debian root file
# system from the Debian mirror apt is configured with, imported into Docker.
#   images/build-base.sh [TAG [SUITE]]   (default skill-executor/base:bookworm, bookworm;
#                                        trixie for the python3.13 tier)
set -euo pipefail

tag="${1:-skill-executor/base:bookworm}"
suite="${2:-bookworm}"
docker_bin="${DOCKER:-$(command -v /usr/bin/docker || command -v docker)}"
[[ "$suite" =~ ^[a-z]+$ ]] || { echo "build-base.sh: not a Debian release name: $suite" >&2; exit 2; }

mirror_from_apt() {
  local uri=""
  if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  fi
  if [[ -z "$uri" && -f /etc/apt/sources.list ]]; then
    uri=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' /etc/apt/sources.list)
  fi
  echo "${uri:-http://deb.debian.org/debian}"
}

mirror="${DEBIAN_MIRROR:-$(mirror_from_apt)}"
command -v debootstrap >/dev/null || { echo "build-base.sh: debootstrap is not installed" >&2; exit 1; }

rootfs="$(mktemp -d /tmp/skill-executor-rootfs.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT
echo "[build-base] debootstrap $suite from $mirror" >&2
debootstrap --variant=minbase --include=ca-certificates,python3 "$suite" "$rootfs" "$mirror" >/tmp/skill-executor-debootstrap.log 2>&1 \
  || { tail -20 /tmp/skill-executor-debootstrap.log >&2; exit 1; }
# apt inside the image uses the same mirror; keep the image small.
printf 'deb %s %s main\ndeb %s %s-updates main\n' "$mirror" "$suite" "$mirror" "$suite" > "$rootfs/etc/apt/sources.list"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | "$docker_bin" import --change 'CMD ["/bin/bash"]' - "$tag" >/dev/null
echo "[build-base] imported $tag" >&2
