#!/usr/bin/env bash
# The main job, end to end on real data, from a fresh machine: set up .venv, train on Multi30k
# EN-DE for TRAIN_MINUTES (default 8; the full recipe uses 55), average checkpoints, translate the
# test set and a few sentences, print sacreBLEU and tokenized BLEU.
#
# RAW_DATA_DIR defaults to ../shared/data/multi30k. Elsewhere, fetch Multi30k's public files
# (github.com/multi30k/dataset, data/task1/raw: train/val/test_2016_flickr .en/.de, gunzipped)
# into a folder and point RAW_DATA_DIR at it; or train WMT14 through TFDS with
#   t2t-lite-trainer --problem=translate_ende --hparams=base ...   (no code change).
set -euo pipefail
cd "$(dirname "$0")/.."
export TRAIN_MINUTES=${TRAIN_MINUTES:-8} OUT=${OUT:-runs/quickstart}
RAW=${RAW_DATA_DIR:-../shared/data/multi30k}
if [ ! -f "$RAW/train.en" ]; then
  echo "error: no Multi30k files in $RAW (train.en, train.de, val.*, test_2016_flickr.*);" \
       "set RAW_DATA_DIR (see the comment at the top of this script)" >&2
  exit 2
fi
bash scripts/multi30k_recipe.sh
. .venv/bin/activate
printf '%s\n' "A man in a red shirt is riding a bicycle down the street ." \
              "Two children are playing with a dog on the beach ." \
              "A woman is reading a book in the park ." |
  t2t-lite-decoder --output_dir="$OUT/averaged" --decode_hparams=beam_size=4,alpha=0.6
