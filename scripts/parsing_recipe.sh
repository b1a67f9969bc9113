#!/usr/bin/env bash
# Constituency parsing (paper section 6.3) on a 2-core CPU: train on the train split of the WSJ
# sample for at most TRAIN_MINUTES of wall time, then decode the dev split several ways and score
# each with EVALB's conventions (labeled P/R/F1), in one table:
#
#   constrained      the averaged checkpoints, constrained search with DECODE (default beam 4,
#                    alpha 0.6: tuned on held-out trees), every tree well formed
#   last checkpoint  the same, without checkpoint averaging
#   greedy           constrained greedy decoding of the averaged checkpoints
#   paper            the paper's search: unconstrained, beam 21, alpha 0.3, input + 300
#
#   bash scripts/parsing_recipe.sh                                  # docs/parsing.md's dev table
#   PROBLEM=parsing_english_ptb16k_xx OUT=runs/parsing_xx bash scripts/parsing_recipe.sh
#                                              # XX leaves: the paper-faithful setting's model
#   TRAIN_MINUTES=5 OUT=runs/parsing_quick bash scripts/parsing_recipe.sh          # a smoke run
#   RAW_DATA_DIR=~/treebank_3/parsed/mrg/wsj HPARAMS=transformer_parsing_base ...  # full WSJ, GPUs
#
# RAW_DATA_DIR holds the .mrg files (here: ../shared/data/ptb_sample; train wsj_0001-0159,
# dev wsj_0160-0179; with the full treebank: sections 02-21 / 22 / 23). The floors to beat are
# printed first (scripts/parsing_baseline.py: right-branching trees over the gold tags, and the
# tag-free variant with every label NP). Set EVALB=/path/to/evalb (and EVALB_PRM, default
# COLLINS.prm beside it) to cross-check every score with the real EVALB. Settings were tuned on
# a slice of the training files held out from training (scripts/parsing_tune.sh), never on dev.
set -euo pipefail
cd "$(dirname "$0")/.."
RAW=${RAW_DATA_DIR:-../shared/data/ptb_sample}
OUT=${OUT:-runs/parsing}
DATA=${DATA_DIR:-t2t_data}
MINUTES=${TRAIN_MINUTES:-60}
PROBLEM=${PROBLEM:-parsing_english_ptb16k}
HPARAMS=${HPARAMS:-transformer_parsing_cpu}
SAVE=${SAVE_CHECKPOINTS_STEPS:-200}
AVERAGE=${AVERAGE:-5}
# The problem's decode defaults are the paper's (beam 21, alpha 0.3, +300: the full WSJ); on the
# sample, beam 4 with alpha 0.6 was the best setting on the held-out trees (scripts/parsing_tune.sh).
DECODE=${DECODE:-beam_size=4,alpha=0.6}   # overrides of the problem's decode defaults
SPLIT=${SPLIT:-dev}
bash scripts/setup.sh runtime
. .venv/bin/activate
export TF_CPP_MIN_LOG_LEVEL=2 TF_ENABLE_ONEDNN_OPTS=1
python scripts/parsing_baseline.py --gold_dir="$RAW" --split="$SPLIT" | grep -E "labels|all sentences"
start=$(date +%s)
# Dev BLEU of linearized trees is not the metric: --no_eval_bleu (the dev loss is still logged).
t2t-lite-trainer --problem="$PROBLEM" --raw_data_dir="$RAW" --data_dir="$DATA" \
  --hparams="$HPARAMS" --output_dir="$OUT" --train_steps=1000000 --train_minutes="$MINUTES" \
  --save_checkpoints_steps="$SAVE" --keep_checkpoint_max=10 --eval_every=1000 --eval_steps=20 \
  --log_every=100 --no_eval_bleu
trained=$(date +%s)
echo "training wall time: $(( (trained - start) / 60 )) min $(( (trained - start) % 60 )) s"
t2t-lite-avg-checkpoints --output_dir="$OUT" --num_last_checkpoints="$AVERAGE" --avg_dir="$OUT/averaged"
# The split's sentences, one per line, in the order the scorer expects; and its gold trees.
t2t-lite-parse-eval --gold_dir="$RAW" --split="$SPLIT" --write_inputs="$OUT/$SPLIT.words" \
  --write_gold="$OUT/$SPLIT.gold.trees"
rows=(
  "constrained|$OUT/averaged|$DECODE"
  "last checkpoint|$OUT|$DECODE"
  "greedy|$OUT/averaged|beam_size=1"
  "paper|$OUT/averaged|constrained=false,beam_size=21,alpha=0.3,extra_length=300"
)
summary=()
for row in "${rows[@]}"; do
  IFS='|' read -r name model settings <<< "$row"
  tag=$(echo "$name" | tr ' ' '_')
  decode_start=$(date +%s)
  t2t-lite-decoder --output_dir="$model" --decode_from_file="$OUT/$SPLIT.words" \
    --decode_to_file="$OUT/$SPLIT.$tag.trees" --decode_hparams="batch_size=16${settings:+,}$settings"
  seconds=$(( $(date +%s) - decode_start ))
  well_formed=()
  [[ "$settings" == *constrained=false* ]] || well_formed=(--require_well_formed)
  score=$(t2t-lite-parse-eval --gold_dir="$RAW" --split="$SPLIT" --decoded="$OUT/$SPLIT.$tag.trees" \
    --write_trees="$OUT/$SPLIT.$tag.ptb" "${well_formed[@]}")
  echo "== $name ($settings), decoded in $seconds s"
  echo "$score"
  if [ -n "${EVALB:-}" ]; then
    "$EVALB" -p "${EVALB_PRM:-$(dirname "$EVALB")/COLLINS.prm}" "$OUT/$SPLIT.gold.trees" \
      "$OUT/$SPLIT.$tag.ptb" | grep -E "^Bracketing (Recall|Precision|FMeasure)" | head -3
  fi
  prf=$(echo "$score" | head -1 | sed -E 's/.*P ([0-9.]+) R ([0-9.]+) F1 ([0-9.]+).*/\1 \2 \3/')
  leaves=$(echo "$score" | grep "leaf count" | sed -E 's/.*\(([0-9.]+%)\).*/\1/')
  repaired=$(echo "$score" | grep "trees repaired" | sed -E 's/trees repaired: ([0-9]+) of.*/\1/')
  summary+=("$(printf '%-16s P/R/F1 %-20s leaf count right %-7s repaired %-4s %5s s   %s' \
    "$name" "$prf" "$leaves" "$repaired" "$seconds" "$settings")")
done
echo "== $PROBLEM, $HPARAMS, $SPLIT split of $RAW:"
printf '%s\n' "${summary[@]}"
