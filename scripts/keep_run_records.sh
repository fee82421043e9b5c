#!/usr/bin/env bash
# Keep the records a protocol reads of each finished run under a protocol's --out folder: config.yaml,
# summary.json and environment.json (a few kB a run, no checkpoints), copied to KEPT_DIR with the same layout.
# Copied back under an --out folder, the runs are reused as they stand and new runs are paired against them on
# the same kind of machine (docs/concepts.md, "One kind of machine a table").
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 RUNS_DIR KEPT_DIR   (RUNS_DIR: a protocol's --out folder)" >&2
  exit 2
fi
src=${1%/}
dest=${2%/}
if [ ! -d "$src" ]; then
  echo "error: '$src' is not a folder; give the --out folder of a protocol" >&2
  exit 2
fi
count=0
while IFS= read -r -d '' summary; do
  run=$(dirname "$summary")
  relative=${run#"$src"}
  mkdir -p "$dest$relative"
  for record in config.yaml summary.json environment.json; do
    if [ -f "$run/$record" ]; then cp "$run/$record" "$dest$relative/"; fi
  done
  count=$((count + 1))
done < <(find "$src" -name summary.json -print0 | sort -z)
if [ "$count" -eq 0 ]; then
  echo "error: no finished run (a folder with summary.json) under '$src'" >&2
  exit 1
fi
echo "kept the records of $count finished run(s) of '$src' in '$dest'"
