#!/bin/bash
# The font testbed's tables: each group's configs x SEEDS (default 0-4) x pretrained BACKBONES (default
# the brief glyph recipe and its pretraining seed 1), paired within a backbone against the baseline whose name is
# the longest prefix of the run's (or the one a RUN=BASELINE entry names), pooled over the backbones (the
# replication rules of docs/results/font_testbed.md).
#   bash scripts/install_system_packages.sh        # once: the font packages font_glyphs renders
#   bash scripts/font_testbed_tables.sh [GROUP...]  # groups, in this order by default: ms sft gsp ccp reference longtail
#   (searched: the methods whose own knobs were searched too; with CONFIG_DIR=configs/font_testbed/tuned only)
# Runs go to $OUT (default runs/font_testbed)/all/<backbone>/<config>-seed<s>/, shared by the groups (the baseline
# trains once) and reused when the command runs again, so a stopped batch resumes; each group's table is
# written to $OUT/<group>.md and .json. JOBS (default 2) runs train side by side; train.threads is pinned to 1.
# One run: about 6 minutes on one idle core of this project's 2-core machine (docs/results/font_testbed.md).
set -eu
cd "$(dirname "$0")/.."
# CONFIG_DIR=configs/font_testbed/tuned: the same groups (ms sft gsp ccp) with each loss at its dmlkit tune values
# (the rows' files there carry the searched keys last in their base: lists; same names, so the same pairs).
T=${CONFIG_DIR:-configs/font_testbed}
case ${T%/} in */tuned) OUT=${OUT:-runs/font_testbed_tuned} ;; *) OUT=${OUT:-runs/font_testbed} ;; esac
BACKBONES=${BACKBONES:-"glyphs-resnet20-brief glyphs-resnet20-brief@seed1"}

source scripts/protocol_table.sh  # table FOLDER LABEL "BASELINES" CONFIG...; DMLKIT, SEEDS, JOBS defaults

group() {
  case $1 in
    ms) table all ms font_testbed font_testbed font_testbed_contrastive_c2 ;;
    sft) table all sft "font_testbed font_testbed_npair font_testbed_triplet" font_testbed font_testbed_sft \
      font_testbed_npair font_testbed_npair_sohn font_testbed_npair_sft font_testbed_npair_sft_joint font_testbed_triplet \
      font_testbed_triplet_sft ;;  # npair_sohn: N-pair as Sohn trains it, against PML's form
    gsp) table all gsp "font_testbed font_testbed_contrastive_c2 font_testbed_triplet font_testbed_proxy_anchor" \
      font_testbed font_testbed_gsp font_testbed_gsp_zs font_testbed_contrastive_c2 font_testbed_contrastive_c2_gsp \
      font_testbed_contrastive_c2_gsp_zs font_testbed_triplet font_testbed_triplet_gsp font_testbed_triplet_gsp_zs \
      font_testbed_proxy_anchor font_testbed_proxy_anchor_gsp font_testbed_proxy_anchor_gsp_zs ;;
    ccp)  # each CCP row against its loss validated as CCP is (*_val); the names do not tell it, so the pairs are named
      table all ccp "font_testbed_ccp=font_testbed_val font_testbed_ccp_patience1=font_testbed_val \
font_testbed_triplet_ccp_sample=font_testbed_triplet_val font_testbed_contrastive_c2_ccp=font_testbed_contrastive_c2_val \
font_testbed_triplet_ccp_sample_patience1=font_testbed_triplet_val \
font_testbed_contrastive_c2_ccp_patience1=font_testbed_contrastive_c2_val" \
        font_testbed_val font_testbed_ccp font_testbed_ccp_patience1 font_testbed_triplet_val font_testbed_triplet_ccp_sample \
        font_testbed_triplet_ccp_sample_patience1 font_testbed_contrastive_c2_val font_testbed_contrastive_c2_ccp \
        font_testbed_contrastive_c2_ccp_patience1 ;;
    searched)  # the methods at their own knobs' searched values on the tuned MS (_ccp.yaml, _zero_shot.yaml,
      # _sft.yaml), each beside its row at the defaults: CCP against MS validated as CCP is, GSP + L_ZS against
      # GSP + MS, SFT against MS; the rows exist only among the tuned configs
      case ${T%/} in */tuned) ;; *) echo "group 'searched' needs CONFIG_DIR=configs/font_testbed/tuned" >&2; exit 2 ;; esac
      table all searched "font_testbed_ccp_searched=font_testbed_val font_testbed_ccp=font_testbed_val \
font_testbed_gsp_zs_searched=font_testbed_gsp font_testbed_gsp_zs=font_testbed_gsp font_testbed" \
        font_testbed_val font_testbed_ccp font_testbed_ccp_searched font_testbed_gsp font_testbed_gsp_zs \
        font_testbed_gsp_zs_searched font_testbed font_testbed_sft font_testbed_sft_searched ;;
    reference)  # every loss against MS, FastAP's Hard batches against its Random ones, ProxyAnchor's proxy rates
      table all reference "font_testbed font_testbed_fastap_hard=font_testbed_fastap_random \
font_testbed_proxy_anchor_lr100x=font_testbed_proxy_anchor" font_testbed \
        font_testbed_contrastive_c2 font_testbed_triplet font_testbed_margin font_testbed_proxy_anchor \
        font_testbed_proxy_anchor_lr100x font_testbed_normalized_softmax font_testbed_fastap_random \
        font_testbed_fastap_hard font_testbed_ce_weak ;;
    longtail) table all longtail "font_testbed_longtail font_testbed_longtail_balanced" font_testbed_longtail \
      font_testbed_longtail_balanced font_testbed_longtail_sft font_testbed_longtail_sft_unbalanced \
      font_testbed_longtail_translation font_testbed_longtail_balanced_sft_unbalanced ;;
    *) echo "unknown group '$1'; valid: ms sft gsp ccp searched reference longtail" >&2; exit 2 ;;
  esac
}

GROUPS_TO_RUN=("$@")
[ ${#GROUPS_TO_RUN[@]} -eq 0 ] && GROUPS_TO_RUN=(ms sft gsp ccp reference longtail)
for g in "${GROUPS_TO_RUN[@]}"; do group "$g"; done
