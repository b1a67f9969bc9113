#!/usr/bin/env bash
# The main job, end to end on real data, from a fresh clone: set up .venv with the runtime
# dependencies only (scripts/setup.sh runtime; pip shows its progress), train on Multi30k EN-DE for
# TRAIN_MINUTES (default 8; the full recipe uses 55), average checkpoints, translate the test set
# and a few sentences, print sacreBLEU and tokenized BLEU. The model lands in OUT (default
# runs/quickstart; the averaged one, which translates, in OUT/averaged).
#
# RAW_DATA_DIR defaults to ../shared/data/multi30k; where that folder does not exist, the
# problem downloads Multi30k's public files (github.com/multi30k/dataset) into t2t_data/multi30k.
# WMT14 comes through TFDS the same way: t2t-lite-trainer --problem=translate_ende --hparams=base
set -euo pipefail
cd "$(dirname "$0")/.."
export TRAIN_MINUTES=${TRAIN_MINUTES:-8} OUT=${OUT:-runs/quickstart}
bash scripts/multi30k_recipe.sh
. .venv/bin/activate
printf '%s\n' "A man in a red shirt is riding a bicycle down the street ." \
              "Two children are playing with a dog on the beach ." \
              "A woman is reading a book in the park ." |
  t2t-lite-decoder --output_dir="$OUT/averaged" --decode_hparams=beam_size=4,alpha=1.2,extra_length=50
