#!/bin/bash
# The font testbed's tuned baselines on one lent GPU machine: `dmlkit tune` of each loss's validated config
# (multi-similarity, contrastive C2, triplet, ProxyAnchor, normalized softmax; same trial budget, pruner and
# validation classes for each), JOBS workers sharing one card, until TRAIN_SECONDS. Each study goes on where the
# previous call stopped: on the warm machine the same command resumes them; on a fresh one carry its studies.tar.gz and
# resume.tar.gz back (STUDIES_TAR, RESUME_TAR) and the interrupted trials resume from their
# last.pt. The studies are those of the CPU machine (the same commands, docs/results/font_testbed.md, "Tuned
# baselines"), but a GPU trains to other weights: keep the two apart.
# Prepare here (once), in the repository root, beside the .debs and the PML wheel of scripts/gpu_font_testbed_tables.sh:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl \
#     optuna==5.0.0 colorlog   (the journal storage needs no SQLAlchemy; tqdm is on the machine)
# Run (device tool): command "OUT_DIR=$OUT TRAIN_SECONDS=480 bash scripts/gpu_font_testbed_tune.sh", carry
# [".debs", ".whl"] (and the two archives with STUDIES_TAR / RESUME_TAR on a fresh machine), timeout_s 560.
# The machine has no network, so the font packages travel as .debs and the Python packages as wheels.
# When the tree, .debs and .whl exceed the 64 MiB a call carries, carry the faces-only packages of
# scripts/slim_font_debs.sh instead (.debs-slim, 37 MB against 60) and give DEBS=.debs-slim.
set -u
cd "$(dirname "$0")/.."
if [ "${INSTALL_DEBS:-1}" = 1 ]; then  # INSTALL_DEBS=0: tests/test_table_scripts.py and machines with the fonts
  dpkg -i --force-depends "${DEBS:-.debs}"/*.deb > /dev/null || { echo "gpu_font_testbed_tune: installing ${DEBS:-.debs} failed" >&2; exit 1; }
fi
if [ "${INSTALL_WHEELS:-1}" = 1 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=$PWD/src:/tmp/site DMLKIT_PLUGINS=dmlkit_lab.plugin DMLKIT_CACHE=$PWD/.cache/dmlkit
fi
export PYTHONUNBUFFERED=1
PYTHON=${PYTHON:-python3}
T=${CONFIG_DIR:-configs/font_testbed}
LOSSES=${LOSSES:-"font_testbed_val font_testbed_contrastive_c2_val font_testbed_triplet_val \
font_testbed_proxy_anchor_val font_testbed_normalized_softmax_val"}
TRIALS=${TRIALS:-30} JOBS=${JOBS:-8} TRAIN_SECONDS=${TRAIN_SECONDS:-480} PRUNER=${PRUNER:-none}
OUT_DIR=${OUT_DIR:-runs/gpu_tune} STUDIES=${STUDIES:-runs/font_tune_gpu}
EXTRA=(${SETS:-})  # e.g. SETS="--set train.max_steps=8" (tests)
mkdir -p "$OUT_DIR" "$STUDIES"
[ -n "${STUDIES_TAR:-}" ] && { tar -xzf "$STUDIES_TAR" || exit 1; }
[ -n "${RESUME_TAR:-}" ] && { tar -xzf "$RESUME_TAR" || exit 1; }
deadline=$(( $(date +%s) + TRAIN_SECONDS ))
for name in $LOSSES; do
  left=$(( deadline - $(date +%s) ))
  [ "$left" -le 5 ] && break
  # SIGTERM at the deadline: every worker writes its trial's last.pt and enqueues the trial again.
  timeout --signal=TERM --kill-after=90 "$left" "$PYTHON" -m dmlkit tune "$T/$name.yaml" --trials "$TRIALS" \
    --jobs "$JOBS" --pruner "$PRUNER" --out "$STUDIES/$name" --quiet "${EXTRA[@]}" >> "$OUT_DIR/tune.log" 2>&1
  echo "gpu_font_testbed_tune: $name exit $? after $(( $(date +%s) - deadline + TRAIN_SECONDS )) s" >> "$OUT_DIR/tune.log"
done
: > "$OUT_DIR/trials.md"
for name in $LOSSES; do
  [ -f "$STUDIES/$name/trials.md" ] && { echo "## $name"; cat "$STUDIES/$name/trials.md"; echo; } >> "$OUT_DIR/trials.md"
done
# Two archives, so that the results come back under the device tool's 16 MiB a file: studies.tar.gz without
# checkpoints (journals, tables, each trial's config, metrics and summary), resume.tar.gz with the last.pt of the
# trials still unfinished (about 3 MB each), which a fresh machine needs to resume them (STUDIES_TAR, then RESUME_TAR).
# The tool returns files of at most 16 MiB: about five unfinished trials. So size JOBS and TRAIN_SECONDS for waves that
# end inside the call (on an H200, ten SFT + triplet trials take about 120 s of training; twenty GSP + L_ZS trials at
# once trained 311 to 549 of 1,200 steps in 290 s), or continue on the warm machine with the same command.
tar -czf "$OUT_DIR/studies.tar.gz" --exclude='*.pt' "$STUDIES"
unfinished=$(for trial in "$STUDIES"/*/trials/*/; do
  [ -f "$trial/last.pt" ] && [ ! -f "$trial/summary.json" ] && echo "$trial/last.pt"
done)
[ -n "$unfinished" ] && printf '%s\n' "$unfinished" | tar -czf "$OUT_DIR/resume.tar.gz" -T -
tail -n 5 "$OUT_DIR/tune.log"
