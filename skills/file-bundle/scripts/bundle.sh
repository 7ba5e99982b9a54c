#!/usr/bin/env bash
# Inventory SRC and pack it with a manifest: bundle.sh [SRC] [OUTDIR]
set -euo pipefail

src="${1:-inputs}"
outdir="${2:-out}"

if [[ ! -d "$src" ]]; then
  echo "bundle.sh: source folder '$src' does not exist" >&2
  exit 1
fi
mkdir -p "$outdir"

manifest="$outdir/manifest.tsv"
printf 'path\tsize\tsha256\n' > "$manifest"
count=0
total=0
while IFS= read -r -d '' file; do
  rel="${file#"$src"/}"
  size=$(stat -c %s "$file")
  sum=$(sha256sum "$file" | cut -d' ' -f1)
  printf '%s\t%s\t%s\n' "$rel" "$size" "$sum" >> "$manifest"
  count=$((count + 1))
  total=$((total + size))
done < <(find -H "$src" -type f -print0 | sort -z)

tar -czf "$outdir/bundle.tar.gz" -C "$src" . -C "$(cd "$outdir" && pwd)" manifest.tsv
echo "bundled $count files, $total bytes"
