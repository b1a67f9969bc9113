#!/usr/bin/env bash
# One tuning run for the parsing recipe, scored on a slice of the TRAINING files held out from
# training (never on the dev split docs/parsing.md reports): train on wsj_0001-0149 of the WSJ sample,
# score on wsj_0150-0159 (143 trees). Appends one line per decode setting to $ROOT/results.tsv.
#
#   NAME=words_base PROBLEM=parsing_english_ptb16k_words HPARAMS=transformer_parsing_cpu \
#     STEPS=1200 bash scripts/parsing_tune.sh
#
# STEPS (optimizer updates) rather than minutes, so that runs compare whatever else the machine
# is doing; the step rate is logged. DECODES lists decode_hparams to score, separated by ';'.
set -euo pipefail
cd "$(dirname "$0")/.."
SAMPLE=${SAMPLE:-../shared/data/ptb_sample}
ROOT=${ROOT:-runs/parsing_tune}
NAME=${NAME:?NAME=... names the run}
PROBLEM=${PROBLEM:-parsing_english_ptb16k}
HPARAMS=${HPARAMS:-transformer_parsing_cpu}
STEPS=${STEPS:-1200}
SAVE=${SAVE:-200}
AVERAGE=${AVERAGE:-5}
DECODES=${DECODES:-beam_size=1;beam_size=8,alpha=0.6}
USR=()
[ -n "${USR_DIR:-}" ] && USR=(--t2t_usr_dir="$USR_DIR")
bash scripts/setup.sh runtime
. .venv/bin/activate
export TF_CPP_MIN_LOG_LEVEL=2 TF_ENABLE_ONEDNN_OPTS=1

# The held-out slice: a flat folder of links in which wsj_0150-0159 are named wsj_0160-0169, so
# the flat-folder layout (train <= wsj_0159 < dev) trains on 0001-0149 and scores 0150-0159.
HELD=$ROOT/treebank
if [ ! -d "$HELD" ]; then
  mkdir -p "$HELD"
  sample=$(cd "$SAMPLE" && pwd)
  for i in $(seq 1 149); do n=$(printf %04d "$i"); ln -s "$sample/wsj_$n.mrg" "$HELD/wsj_$n.mrg"; done
  for i in $(seq 150 159); do ln -s "$sample/wsj_0$i.mrg" "$HELD/wsj_0$((i + 10)).mrg"; done
fi
OUT=$ROOT/$NAME
t2t-lite-parse-eval --gold_dir="$HELD" --split=dev --write_inputs="$ROOT/heldout.words" 2>/dev/null
start=$(date +%s)
t2t-lite-trainer "${USR[@]}" --problem="$PROBLEM" --raw_data_dir="$HELD" --data_dir="$ROOT/data" \
  --hparams="$HPARAMS" --output_dir="$OUT" --train_steps="$STEPS" \
  --save_checkpoints_steps="$SAVE" --keep_checkpoint_max=10 --eval_every="$STEPS" --eval_steps=20 \
  --log_every=100 --no_eval_bleu 2>&1 | grep -E "^(step|eval|saved|done|resumed)" || true
trained=$(( $(date +%s) - start ))
t2t-lite-avg-checkpoints --output_dir="$OUT" --num_last_checkpoints="$AVERAGE" --avg_dir="$OUT/averaged" \
  >/dev/null
IFS=';' read -ra settings <<< "$DECODES"
for model in last averaged; do
  dir=$OUT; [ "$model" = averaged ] && dir=$OUT/averaged
  for setting in "${settings[@]}"; do
    tag=$(echo "$setting" | tr ',=' '_-')
    decode_start=$(date +%s)
    t2t-lite-decoder "${USR[@]}" --output_dir="$dir" --decode_from_file="$ROOT/heldout.words" \
      --decode_to_file="$OUT/heldout.$model.$tag.trees" --decode_hparams="$setting,batch_size=32" \
      2>/dev/null
    seconds=$(( $(date +%s) - decode_start ))
    score=$(t2t-lite-parse-eval --gold_dir="$HELD" --split=dev --decoded="$OUT/heldout.$model.$tag.trees")
    f1=$(echo "$score" | head -1 | sed -E 's/.*F1 ([0-9.]+).*/\1/')
    repaired=$(echo "$score" | grep "trees repaired" | sed -E 's/trees repaired: ([0-9]+).*/\1/')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%ss\t%ss\n' "$NAME" "$PROBLEM" "$HPARAMS" "$STEPS" "$model" \
      "$setting" "$f1" "$trained" "$seconds" | tee -a "$ROOT/results.tsv"
    echo "  repaired: $repaired"
  done
done
