#!/bin/bash
# Every table of the testbed (the reference table, the SFT, CCP and GSP tables) on one
# lent GPU machine in at most 10 minutes: 5 paired seeds of every configs/testbed/*.yaml, main rows first.
# Prepare here (once): the wheels as in scripts/gpu_protocol_batch.sh, and the rendered glyphs with the
# pretrained backbone:  mkdir -p .cache && cp -r ~/.cache/dmlkit .cache/
# Run (device tool): command "OUT_DIR=$OUT bash scripts/gpu_testbed_tables.sh", carry [".whl", ".cache/dmlkit"],
# timeout_s 590. Training stops at TRAIN_SECONDS (default 480); whatever finished is tabulated into
# $OUT/results.md (paired differences against each row's baseline: the longest config-name prefix), on each
# pretrained backbone of BACKBONES (default: three pretraining seeds) and pooled over them. Carry
# .cache/dmlkit/pretrained holding the three backbones (dmlkit pretrain glyphs-resnet20@seedN) or the machine
# builds them first, inside the budget.
set -u
cd "$(dirname "$0")/.."
T=configs/testbed
FIRST="testbed testbed_contrastive testbed_npair testbed_triplet testbed_sft testbed_npair_sft testbed_ccp testbed_gsp"
CONFIGS=()
for name in $FIRST; do [ -f "$T/$name.yaml" ] && CONFIGS+=("$T/$name.yaml"); done
for f in "$T"/testbed*.yaml; do
  case " $FIRST " in *" $(basename "$f" .yaml) "*) ;; *) CONFIGS+=("$f") ;; esac
done
export BACKBONES=${BACKBONES:-"glyphs-resnet20 glyphs-resnet20@seed1 glyphs-resnet20@seed2"}
export SEEDS=${SEEDS:-"0 1 2 3 4"} TRAIN_SECONDS=${TRAIN_SECONDS:-480} JOBS=${JOBS:-12}
export BASELINE=${BASELINE:-"testbed testbed_contrastive testbed_contrastive_c2 testbed_triplet testbed_npair \
testbed_proxy_anchor testbed_normalized_softmax testbed_ce_weak testbed_ce_metric testbed_fastap_random"}
exec bash scripts/gpu_protocol_batch.sh "${CONFIGS[@]}"
