#!/bin/bash
# Run a `dmlkit protocol` batch on a lent GPU machine whose Python lacks pytorch-metric-learning and faiss-cpu.
# Prepare here (once):   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#                          --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#                          -d .whl pytorch-metric-learning==2.9.0 faiss-cpu==1.15.1
# and carry `.whl` and `.cache/dmlkit/glyphs` (the rendered glyphs) with the command:
#   TRAIN_SECONDS=400 JOBS=12 OUT_DIR=$OUT bash scripts/gpu_protocol_batch.sh CONFIG...
# Runs train in JOBS parallel processes until TRAIN_SECONDS, then the finished runs are tabulated
# (n seeds per row) into $OUT_DIR/results.md and results.json, the run folders (no checkpoints) into $OUT_DIR/runs.tar.gz
# and the backbones' checksums into $OUT_DIR/backbones.txt. BASELINE="name ..." adds the table of paired
# differences (`--baseline`); BACKBONES="name ..." runs every config x seed on each pretrained backbone and pools
# the paired table over them (`--backbones`). A config naming a pretrained backbone builds it first, inside the time budget
# (carry `.cache/dmlkit/pretrained` to reuse one; the cache key includes the torch version, so a machine
# with another torch builds its own and its tables pair runs on that backbone). A GPU pretrains a recipe to other
# weights each time (cuDNN's autotuner), so $OUT_DIR/backbones.tar brings the entries back: extract it into
# .cache/dmlkit/pretrained/ here and carry that folder, and the next session fine-tunes the same backbone.
set -u
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
# Not installed, so no entry points: DMLKIT_PLUGINS brings the lab's datasets and backbones (dmlkit.plugins).
export PYTHONPATH=$PWD/src:/tmp/site DMLKIT_CACHE=$PWD/.cache/dmlkit OMP_NUM_THREADS=2 PYTHONUNBUFFERED=1 \
  DMLKIT_PLUGINS=dmlkit_lab.plugin
# RUNS_TAR=FILE: the runs.tar.gz of an earlier session, extracted into /tmp/runs first, so that its finished runs are
# reused (only with that session's backbones.tar carried too: the runs record their backbone's checksum).
[ -n "${RUNS_TAR:-}" ] && { tar -xzf "$RUNS_TAR" -C /tmp || exit 1; }
SEEDS=${SEEDS:-"0 1 2"}
BASE=()
[ -n "${BASELINE:-}" ] && BASE=(--baseline $BASELINE)
[ -n "${BACKBONES:-}" ] && BASE+=(--backbones $BACKBONES)
# The protocol's workers carry this tag in their environment: at the deadline only they are stopped, never another
# program's multiprocessing workers (a `pkill -f multiprocessing.spawn` here once stopped a batch running beside it).
export DMLKIT_BATCH_TAG="gpu-protocol-batch-$$"
stop_own_workers() {
  local env pid
  for env in /proc/[0-9]*/environ; do
    pid=${env#/proc/}; pid=${pid%/environ}
    [ "$pid" = $$ ] && continue
    { tr '\0' '\n' < "$env"; } 2>/dev/null | grep -qx "DMLKIT_BATCH_TAG=$DMLKIT_BATCH_TAG" && kill "$pid" 2>/dev/null
  done
  return 0
}
timeout -k 5 "${TRAIN_SECONDS:-400}" setsid python3 -m dmlkit protocol holdout "$@" --seeds $SEEDS --jobs "${JOBS:-12}" \
  --out /tmp/runs --columns all "${BASE[@]}" > "${OUT_DIR:-.}/train.log" 2>&1
stop_own_workers; sleep 1
python3 -m dmlkit protocol holdout "$@" --seeds $SEEDS --out /tmp/runs --columns all --reuse-only "${BASE[@]}"
cp /tmp/runs/results.md /tmp/runs/results.json "${OUT_DIR:-.}/"
# The run folders without their checkpoints (config, metrics, summary, environment: what the tables are made of),
# and the tensor checksum of every pretrained backbone the runs used: a backbone built on this machine is not the
# one of another machine with the same name (the cache key holds the torch version, cuDNN picks its algorithms).
tar --exclude='*.pt' --exclude=plots -czf "${OUT_DIR:-.}/runs.tar.gz" -C /tmp runs  # one file (no deep folders come back)
for entry in "$DMLKIT_CACHE"/pretrained/*.pt; do
  [ -f "$entry" ] && python3 -c "import sys, torch; e = torch.load(sys.argv[1], map_location='cpu', weights_only=True); \
print(sys.argv[1].rsplit('/', 1)[-1], 'tensors sha256', e['checksum'])" "$entry"
done > "${OUT_DIR:-.}/backbones.txt"
# The backbones themselves (about 1 MB each): a GPU does not repeat a pretraining, so the next session reuses these
# only if they travel back. Keep backbones.tar, extract it into .cache/dmlkit/pretrained/ and carry that folder.
tar -cf "${OUT_DIR:-.}/backbones.tar" -C "$DMLKIT_CACHE" pretrained 2>/dev/null || true
