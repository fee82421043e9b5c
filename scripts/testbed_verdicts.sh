#!/bin/bash
# The testbed's verdicts over pretrained backbones x seeds (issue 29): each comparison that the docs call
# "ahead", "behind" or a resolved effect, re-measured on every backbone of BACKBONES (default: the recipe's
# seed and two more pretraining seeds) x SEEDS (default 0-4), paired within a backbone, pooled over them.
#   bash scripts/testbed_verdicts.sh [GROUP...]      (groups, in this order by default: ccp_ms pair_gsp fastap
#                                                      sft_npair ccp_triplet)
# Runs go to $OUT (default runs/verdicts)/<group>/<backbone>/<config>-seed<s>/ and are reused when the
# command runs again, so a stopped batch resumes; each group writes its results.md / results.json there.
# JOBS (default 2) runs train side by side; every testbed config pins train.threads: 1, so the results do not
# depend on JOBS or the shell's OMP_NUM_THREADS. About 100 s a run per core on this project's 2-core machine.
set -eu
cd "$(dirname "$0")/.."
DMLKIT=${DMLKIT:-.venv/bin/dmlkit}
OUT=${OUT:-runs/verdicts}
SEEDS=${SEEDS:-"0 1 2 3 4"}
JOBS=${JOBS:-2}
BACKBONES=${BACKBONES:-"glyphs-resnet20 glyphs-resnet20@seed1 glyphs-resnet20@seed2"}
T=configs/testbed

table() {  # table GROUP "BASELINES" CONFIG...   (REUSE=1: tabulate finished runs only)
  local group=$1 baselines=$2; shift 2
  local configs=() extra=()
  for name in "$@"; do configs+=("$T/$name.yaml"); done
  [ "${REUSE:-0}" = 1 ] && extra=(--reuse-only)
  $DMLKIT protocol holdout "${configs[@]}" --seeds $SEEDS --backbones $BACKBONES --baseline $baselines \
    --jobs "$JOBS" --columns all --out "$OUT/$group" "${extra[@]}"
}

group() {
  case $1 in
    ccp_ms) table ccp_ms testbed_val25 testbed_val25 testbed_ccp ;;
    pair_gsp)  # C2 vs MS, GSP with MS and with C2
      table pair_gsp "testbed testbed_contrastive_c2" testbed testbed_contrastive_c2 testbed_gsp testbed_contrastive_c2_gsp ;;
    fastap)  # FastAP Hard against Random on the same runs, then Hard and Random against MS with pair_gsp's rows
      table pair_gsp testbed_fastap_random testbed_fastap_random testbed_fastap_hard
      cp "$OUT/pair_gsp/results.md" "$OUT/fastap_hard_vs_random.md"
      cp "$OUT/pair_gsp/results.json" "$OUT/fastap_hard_vs_random.json"
      table pair_gsp "testbed testbed_contrastive_c2" testbed testbed_contrastive_c2 testbed_gsp \
        testbed_contrastive_c2_gsp testbed_fastap_random testbed_fastap_hard ;;
    sft_npair) table sft_npair testbed_npair testbed_npair testbed_npair_sft_joint testbed_npair_sft_target_all ;;
    ccp_triplet) table ccp_triplet testbed_triplet_val25 testbed_triplet_val25 testbed_triplet_ccp_sample ;;
    *) echo "unknown group '$1'; valid: ccp_ms pair_gsp fastap sft_npair ccp_triplet" >&2; exit 2 ;;
  esac
}

GROUPS_TO_RUN=("$@")
[ ${#GROUPS_TO_RUN[@]} -eq 0 ] && GROUPS_TO_RUN=(ccp_ms pair_gsp fastap sft_npair ccp_triplet)
for g in "${GROUPS_TO_RUN[@]}"; do group "$g"; done
