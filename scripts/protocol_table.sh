# Sourced by the table scripts (testbed_verdicts.sh, font_testbed_tables.sh): one paired protocol table.
#   table FOLDER LABEL "BASELINES" CONFIG...
# trains the missing runs of CONFIG (names of $T/<name>.yaml) x $SEEDS x $BACKBONES with $JOBS processes into
# $OUT/FOLDER/<backbone>/<config>-seed<s>/ (finished runs are reused, so a stopped batch resumes), pairs each
# run with the baseline whose name is the longest prefix of its own (a RUN=BASELINE entry of BASELINES pairs a run
# the names do not tell), and copies the table to $OUT/LABEL.md and
# .json. REUSE=1 trains nothing and tabulates the finished runs. The sourcing script sets T, OUT and BACKBONES;
# DMLKIT, SEEDS (default 0-4) and JOBS (default 2) default here.
DMLKIT=${DMLKIT:-.venv/bin/dmlkit}
SEEDS=${SEEDS:-"0 1 2 3 4"}
JOBS=${JOBS:-2}

table() {
  local folder=$1 label=$2 baselines=$3; shift 3
  local configs=() extra=()
  for name in "$@"; do configs+=("$T/$name.yaml"); done
  [ "${REUSE:-0}" = 1 ] && extra=(--reuse-only)
  $DMLKIT protocol holdout "${configs[@]}" --seeds $SEEDS --backbones $BACKBONES --baseline $baselines \
    --jobs "$JOBS" --columns all --out "$OUT/$folder" "${extra[@]}"
  cp "$OUT/$folder/results.md" "$OUT/$label.md"
  cp "$OUT/$folder/results.json" "$OUT/$label.json"
}
