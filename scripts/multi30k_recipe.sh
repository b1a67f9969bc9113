#!/usr/bin/env bash
# The Multi30k EN-DE recipe for a 2-core CPU: train for at most TRAIN_MINUTES of wall time,
# average the last 5 checkpoints, beam-decode test_2016_flickr (beam 4, alpha 0.6) and score it
# with sacreBLEU (signature printed) and the paper's tokenized BLEU.
#
#   bash scripts/multi30k_recipe.sh                      # the results in docs/training.md (55 minutes)
#   TRAIN_MINUTES=8 OUT=runs/quick bash scripts/multi30k_recipe.sh
#
# RAW_DATA_DIR holds train/val/test_2016_flickr .en/.de (here: ../shared/data/multi30k). Without
# such a folder the problem downloads Multi30k's public files into DATA_DIR/multi30k.
set -euo pipefail
cd "$(dirname "$0")/.."
RAW=${RAW_DATA_DIR:-../shared/data/multi30k}
OUT=${OUT:-runs/multi30k}
DATA=${DATA_DIR:-t2t_data}
MINUTES=${TRAIN_MINUTES:-55}
HPARAMS=${HPARAMS:-multi30k}
if [ -f "$RAW/train.en" ]; then
  RAW_FLAG=(--raw_data_dir="$RAW")
else
  echo "no Multi30k files in $RAW: the problem downloads the public ones into $DATA/multi30k"
  RAW_FLAG=()
  RAW="$DATA/multi30k"
fi
bash scripts/setup.sh runtime
. .venv/bin/activate
export TF_CPP_MIN_LOG_LEVEL=2 TF_ENABLE_ONEDNN_OPTS=1
start=$(date +%s)
t2t-lite-trainer --problem=translate_ende_multi30k "${RAW_FLAG[@]}" --data_dir="$DATA" \
  --hparams="$HPARAMS" --output_dir="$OUT" --train_steps=100000 --train_minutes="$MINUTES" \
  --save_checkpoints_steps=200 --keep_checkpoint_max=10 --eval_every=600 --eval_steps=20 \
  --log_every=100 --decode_hparams=extra_length=50
trained=$(date +%s)
echo "training wall time: $(( (trained - start) / 60 )) min $(( (trained - start) % 60 )) s"
t2t-lite-avg-checkpoints --output_dir="$OUT" --num_last_checkpoints=5 --avg_dir="$OUT/averaged"
t2t-lite-decoder --output_dir="$OUT/averaged" --decode_from_file="$RAW/test_2016_flickr.en" \
  --decode_to_file="$OUT/test_2016_flickr.hyp.de" --decode_hparams="beam_size=4,alpha=0.6,extra_length=50,batch_size=64"
echo "decoding wall time: $(( $(date +%s) - trained )) s"
t2t-lite-bleu --translation="$OUT/test_2016_flickr.hyp.de" --reference="$RAW/test_2016_flickr.de" --lang=de
