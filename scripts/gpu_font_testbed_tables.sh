#!/bin/bash
# The font testbed's main rows on one lent GPU machine: 5 paired seeds x two brief backbones of
# multi-similarity, contrastive C2, SFT, GSP, CCP and the triplet / N-pair / ProxyAnchor rows (configs/font_testbed), tabulated like
# scripts/font_testbed_tables.sh does on the CPU. The machine has no network, so the font packages travel as .debs.
# Prepare here (once), in the repository root:
#   echo /.debs/ >> .git/info/exclude; mkdir -p .debs && (cd .debs && apt-get download $(../.venv/bin/python -c \
#     "from dmlkit_lab.datasets.font_faces import FONT_PACKAGES; print(*FONT_PACKAGES)"))   # 17 files, 59.6 MB
#   the PML wheel as in scripts/gpu_protocol_batch.sh (only pytorch-metric-learning: faiss-cpu does not fit
#   beside the fonts in the 64 MiB a call carries, and dmlkit's search does not need it).
# Run (device tool): command "OUT_DIR=$OUT BACKBONES=glyphs-resnet20-brief TRAIN_SECONDS=330 bash
# scripts/gpu_font_testbed_tables.sh", carry [".debs", ".whl/pytorch_metric_learning-2.9.0-py3-none-any.whl"]
# (60 MiB with the tree), timeout_s 450. The machine's torch differs from this one's, so the backbones' cache key
# differs and they are built there first (under a minute each on an H200): do not carry ~/.cache. font_glyphs
# renders once there. Measured on an H200 (2026-11-28, docs/results/font_testbed.md): 12 runs side by side, MS 74 s
# a run, SFT 185 s, GSP 112 s; a first call of 330 s finished 10 runs (the rendering and the backbone come first),
# a second call on the warm machine resumed the 12 interrupted runs and finished 25 more. A call that names one
# backbone and a short ROWS list ends its rows; the whole list is about 15 minutes of the machine per backbone.
# A GPU pretrains the backbone to other weights each session (2026-11-28: two H200 sessions, MS 51.31 and 52.79):
# keep $OUT/backbones.tar and $OUT/runs.tar.gz, and in the next session extract the first into
# .cache/dmlkit/pretrained/ and carry it with the runs (RUNS_TAR=runs.tar.gz): its runs then add to the same backbone.
# The device tool brings back at most 8 files from $OUT: this script writes 6 (results.md/.json, train.log,
# runs.tar.gz, backbones.txt/.tar), so a device check in the same call writes into a subfolder that is then packed:
#   (OUT=/tmp/dc BUDGET=100 bash scripts/device_check.sh --only environment cuda_tests; tar -czf $OUT/device_check.tar.gz -C /tmp dc)
# BACKBONES may also name weights files: copy a cache entry built here (e.g. ~/.cache/dmlkit/pretrained/
# glyphs-resnet20-brief@seed1-<key>.pt) to .pretrained/brief_seed1_cpu.pt, carry ".pretrained" and give
# BACKBONES=.pretrained/brief_seed1_cpu.pt: the GPU fine-tunes this machine's backbone (runs under brief_seed1_cpu/).
set -u
cd "$(dirname "$0")/.."
if [ "${INSTALL_DEBS:-1}" = 1 ]; then  # INSTALL_DEBS=0 and BATCH=stub: tests/test_table_scripts.py
  dpkg -i --force-depends "${DEBS:-.debs}"/*.deb > /dev/null || { echo "gpu_font_testbed_tables: installing ${DEBS:-.debs} failed" >&2; exit 1; }
fi
T=${CONFIG_DIR:-configs/font_testbed}  # configs/font_testbed/tuned: the rows at their losses' dmlkit tune values
# Main rows first (what finishes inside TRAIN_SECONDS is tabulated): the runs go backbone by backbone, row by row.
ROWS=${ROWS:-"font_testbed font_testbed_contrastive_c2 font_testbed_gsp font_testbed_sft font_testbed_triplet \
font_testbed_triplet_sft font_testbed_npair font_testbed_npair_sft_joint font_testbed_contrastive_c2_gsp \
font_testbed_proxy_anchor font_testbed_proxy_anchor_gsp font_testbed_triplet_gsp font_testbed_gsp_zs \
font_testbed_val font_testbed_ccp font_testbed_ccp_patience1"}
CONFIGS=()
for name in $ROWS; do CONFIGS+=("$T/$name.yaml"); done
export BACKBONES=${BACKBONES:-"glyphs-resnet20-brief glyphs-resnet20-brief@seed1"}
export SEEDS=${SEEDS:-"0 1 2 3 4"} TRAIN_SECONDS=${TRAIN_SECONDS:-480} JOBS=${JOBS:-12}
# The CCP names extend font_testbed (or their loss's config), not their baseline validated as CCP is (*_val): named pairs.
# Of these defaults, the entries whose runs are all among ROWS are kept.
PAIRS="font_testbed font_testbed_npair font_testbed_triplet font_testbed_contrastive_c2 font_testbed_proxy_anchor \
font_testbed_ccp=font_testbed_val font_testbed_ccp_patience1=font_testbed_val font_testbed_fastap_hard=font_testbed_fastap_random \
font_testbed_triplet_ccp_sample=font_testbed_triplet_val font_testbed_contrastive_c2_ccp=font_testbed_contrastive_c2_val \
font_testbed_triplet_ccp_sample_patience1=font_testbed_triplet_val \
font_testbed_contrastive_c2_ccp_patience1=font_testbed_contrastive_c2_val \
font_testbed_longtail font_testbed_longtail_balanced"
if [ -z "${BASELINE:-}" ]; then
  BASELINE="" rows=" $(echo $ROWS) "
  for entry in $PAIRS; do
    kept=1
    for name in ${entry//=/ }; do case $rows in *" $name "*) ;; *) kept=0 ;; esac; done
    [ $kept = 1 ] && BASELINE+="$entry "
  done
fi
export BASELINE
exec bash "${BATCH:-scripts/gpu_protocol_batch.sh}" "${CONFIGS[@]}"  # pairs each row with its baseline
