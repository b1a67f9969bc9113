#!/usr/bin/env bash
# Constituency parsing (paper section 6.3) on a 2-core CPU: train transformer_parsing_cpu on the
# train split of the WSJ sample for at most TRAIN_MINUTES of wall time, average the last 5
# checkpoints, beam-decode the dev split with the paper's settings (beam 21, alpha 0.3, output
# length up to input + 300) and score it with EVALB's conventions (labeled P/R/F1).
#
#   bash scripts/parsing_recipe.sh                       # 55 minutes of training
#   TRAIN_MINUTES=8 OUT=runs/parsing_quick bash scripts/parsing_recipe.sh
#   RAW_DATA_DIR=~/treebank_3/parsed/mrg/wsj HPARAMS=parsing_big ...   # the full WSJ on GPUs
#
# RAW_DATA_DIR holds the .mrg files (here: ../shared/data/ptb_sample; train wsj_0001-0159,
# dev wsj_0160-0179; with the full treebank: sections 02-21 / 22 / 23). The floor to beat:
# python scripts/parsing_baseline.py (right-branching trees over the gold tags).
set -euo pipefail
cd "$(dirname "$0")/.."
RAW=${RAW_DATA_DIR:-../shared/data/ptb_sample}
OUT=${OUT:-runs/parsing}
DATA=${DATA_DIR:-t2t_data}
MINUTES=${TRAIN_MINUTES:-55}
HPARAMS=${HPARAMS:-transformer_parsing_cpu}
SPLIT=${SPLIT:-dev}
bash scripts/setup.sh
. .venv/bin/activate
export TF_CPP_MIN_LOG_LEVEL=2 TF_ENABLE_ONEDNN_OPTS=1
start=$(date +%s)
# Dev BLEU of linearized trees is not the metric: --no_eval_bleu (the dev loss is still logged).
t2t-lite-trainer --problem=parsing_english_ptb16k --raw_data_dir="$RAW" --data_dir="$DATA" \
  --hparams="$HPARAMS" --output_dir="$OUT" --train_steps=100000 --train_minutes="$MINUTES" \
  --save_checkpoints_steps=200 --keep_checkpoint_max=10 --eval_every=600 --eval_steps=20 \
  --log_every=100 --no_eval_bleu
trained=$(date +%s)
echo "training wall time: $(( (trained - start) / 60 )) min $(( (trained - start) % 60 )) s"
t2t-lite-avg-checkpoints --output_dir="$OUT" --num_last_checkpoints=5 --avg_dir="$OUT/averaged"
# The split's sentences, one per line, in the order the scorer expects.
t2t-lite-parse-eval --gold_dir="$RAW" --split="$SPLIT" --write_inputs="$OUT/$SPLIT.words"
# beam_size=21, alpha=0.3, extra_length=300 are the problem's defaults; spelled out here.
t2t-lite-decoder --output_dir="$OUT/averaged" --decode_from_file="$OUT/$SPLIT.words" \
  --decode_to_file="$OUT/$SPLIT.trees" \
  --decode_hparams="beam_size=21,alpha=0.3,extra_length=300,batch_size=16"
echo "decoding wall time: $(( $(date +%s) - trained )) s"
t2t-lite-parse-eval --gold_dir="$RAW" --split="$SPLIT" --decoded="$OUT/$SPLIT.trees"
