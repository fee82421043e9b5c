#!/bin/bash
# The testbed's verdicts over pretrained backbones x seeds: each comparison that the docs call
# "ahead", "behind" or a resolved effect, re-measured on every backbone of BACKBONES (default: the recipe's
# seed and two more pretraining seeds) x SEEDS (default 0-4), paired within a backbone, pooled over them.
#   bash scripts/testbed_verdicts.sh [GROUP...]      (groups, in this order by default: ccp_ms ccp_triplet
#                                                      fastap sft_npair ms; the closest calls first)
# Runs go to $OUT (default runs/verdicts)/<folder>/<backbone>/<config>-seed<s>/ and are reused when the
# command runs again, so a stopped batch resumes; each table is written to $OUT/<table>.md and .json.
# JOBS (default 2) runs train side by side; every testbed config pins train.threads: 1, so the results do not
# depend on JOBS or the shell's OMP_NUM_THREADS. About 100 s a run per core on this project's 2-core machine.
set -eu
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/verdicts}
BACKBONES=${BACKBONES:-"glyphs-resnet20 glyphs-resnet20@seed1 glyphs-resnet20@seed2"}
T=configs/testbed

source scripts/protocol_table.sh  # table FOLDER LABEL "BASELINES" CONFIG...; DMLKIT, SEEDS, JOBS defaults

group() {  # the multi-similarity family shares folder ms: its testbed runs serve FastAP, C2 and GSP
  case $1 in
    ccp_ms) table ccp_ms ccp_ms testbed_val25 testbed_val25 testbed_ccp ;;
    ccp_triplet) table ccp_triplet ccp_triplet testbed_triplet_val25 testbed_triplet_val25 testbed_triplet_ccp_sample ;;
    fastap) table ms fastap_hard_vs_random testbed_fastap_random testbed_fastap_random testbed_fastap_hard ;;
    sft_npair) table sft_npair sft_npair testbed_npair testbed_npair testbed_npair_sft_joint testbed_npair_sft_target_all ;;
    ms)  # C2 vs MS, GSP with MS and with C2, FastAP (Hard, Random) vs MS
      table ms ms "testbed testbed_contrastive_c2" testbed testbed_contrastive_c2 testbed_gsp testbed_contrastive_c2_gsp \
        testbed_fastap_random testbed_fastap_hard ;;
    *) echo "unknown group '$1'; valid: ccp_ms ccp_triplet fastap sft_npair ms" >&2; exit 2 ;;
  esac
}

GROUPS_TO_RUN=("$@")
[ ${#GROUPS_TO_RUN[@]} -eq 0 ] && GROUPS_TO_RUN=(ccp_ms ccp_triplet fastap sft_npair ms)
for g in "${GROUPS_TO_RUN[@]}"; do group "$g"; done
