#!/usr/bin/env bash
# The Multi30k EN-DE recipe for a 2-core CPU: train for at most TRAIN_MINUTES of wall time,
# average the last AVERAGE checkpoints (saved every SAVE_STEPS updates), beam-decode
# test_2016_flickr (DECODE: beam 4, alpha 1.2) and score it with sacreBLEU (signature printed)
# and the paper's tokenized BLEU.
#
#   bash scripts/multi30k_recipe.sh                      # the results in docs/training.md (55 minutes)
#   TRAIN_MINUTES=8 ENSEMBLE=1 OUT=runs/quick bash scripts/multi30k_recipe.sh   # short: one model
#   TRAIN_STEPS=1500 OUT=runs/steps bash scripts/multi30k_recipe.sh   # by updates, not minutes
#   ENSEMBLE=2 OUT=runs/ens bash scripts/multi30k_recipe.sh   # 2 models at once, decoded as one
#
# Settings (defaults): RAW_DATA_DIR (../shared/data/multi30k), DATA_DIR (t2t_data), HPARAMS
# (multi30k_tiny), TRAIN_MINUTES (55) or TRAIN_STEPS, SAVE_STEPS (200), AVERAGE (5), DECODE
# (beam_size=4,alpha=1.2), ENSEMBLE (auto: two at once where each makes enough updates, else
# one): scripts/multi30k_common.sh, shared with scripts/multi30k_tune.sh,
# which tunes them on the val split. Without RAW_DATA_DIR's files the problem downloads
# Multi30k's public files into DATA_DIR/multi30k.
set -euo pipefail
. "$(dirname "$0")/multi30k_common.sh"
OUT=${OUT:-runs/multi30k}
start=$(date +%s)
multi30k_train_members "$OUT"
trained=$(date +%s)
echo "training wall time: $(( (trained - start) / 60 )) min $(( (trained - start) % 60 )) s"
mapfile -t members < <(multi30k_members "$OUT")
echo "training path: $(multi30k_training_path "${members[0]}")"
averaged=()
for member in "${members[@]}"; do
  multi30k_average "$member" "$member/averaged"
  averaged+=("$member/averaged")
done
multi30k_decode "$(IFS=,; echo "${averaged[*]}")" "$RAW/test_2016_flickr.en" \
  "$OUT/test_2016_flickr.hyp.de"
echo "decoding wall time: $(( $(date +%s) - trained )) s"
t2t-lite-bleu --translation="$OUT/test_2016_flickr.hyp.de" --reference="$RAW/test_2016_flickr.de" --lang=de
