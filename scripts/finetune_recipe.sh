#!/usr/bin/env bash
# Fine-tuning on a 2-core CPU (docs/fine-tuning.md): a general EN-DE model trained on a larger
# corpus (Tatoeba, 170k pairs; or Europarl's 20k-line sample), fine-tuned on Multi30k with
# --warm_start_from, against a model trained on Multi30k alone for the same total minutes; then,
# on that Multi30k-alone run, the best checkpoint (early stopping on dev BLEU) and a run with a
# moving average of the weights against the Multi30k recipe's average of the last 5 checkpoints.
# Prints the in-domain sacreBLEU (test_2016_flickr, beam 4, alpha 0.6) of each.
#
# Four stages, run in this order (STAGES, default all four), each into OUT/its directory:
#   general    the general model on CORPUS          PRETRAIN_MINUTES (30)           GENERAL_STEPS
#   finetuned  general, fine-tuned on Multi30k      TRAIN_MINUTES (25)              FINETUNE_STEPS
#   alone      Multi30k alone, early stopping on    ALONE_MINUTES (PRETRAIN_MINUTES  ALONE_STEPS
#              dev BLEU; then its averages          + TRAIN_MINUTES: 55)
#   ema        Multi30k alone, weight_ema_decay     EMA_MINUTES (= ALONE_MINUTES)   EMA_STEPS
# A stage trains until its minutes or its steps run out, whichever comes first: *_MINUTES=0
# trains by steps alone (a figure reproducible by its update count); every *_STEPS defaults to
# TRAIN_STEPS (100000, so the minutes decide). A finished stage writes OUT/DIR/stage_done.txt
# (its budget, the updates it reached, its wall time, date and CPU) and decodes its models once
# (sacreBLEU cached in OUT/bleu/); a later run skips every finished stage, so the stages can run
# in separate sessions on the same OUT. The table at the end lists every stage finished so far.
# A stage cut off before it finished resumes from its checkpoints with a fresh minute budget:
# for a clean figure delete its directory and run it again.
#
#   bash scripts/finetune_recipe.sh              # all stages: 165 minutes of training; run it alone
#   STAGES="general finetuned" bash scripts/finetune_recipe.sh   # or in pieces: 55 min of training,
#   STAGES=alone bash scripts/finetune_recipe.sh                 #   55 min,
#   STAGES=ema bash scripts/finetune_recipe.sh                   #   55 min (each plus decoding)
#   STAGES=table bash scripts/finetune_recipe.sh                 # only the table of what is done
#   TRAIN_STEPS=4 TRAIN_MINUTES=0.5 PRETRAIN_MINUTES=0.5 DECODE_LINES=4 EVAL_BLEU_EXAMPLES=4 \
#       OUT=/tmp/ft_smoke bash scripts/finetune_recipe.sh  # a smoke run: checks it runs, no figures
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED_DATA:-../shared/data}
CORPUS=${CORPUS:-tatoeba}                 # tatoeba | europarl
OUT=${OUT:-runs/finetune}
DATA=${DATA_DIR:-$OUT/data}
STAGES=${STAGES:-general finetuned alone ema}
PRETRAIN_MINUTES=${PRETRAIN_MINUTES:-30}
TRAIN_MINUTES=${TRAIN_MINUTES:-25}
ALONE_MINUTES=${ALONE_MINUTES:-$(python3 -c "print($PRETRAIN_MINUTES + $TRAIN_MINUTES)")}
EMA_MINUTES=${EMA_MINUTES:-$ALONE_MINUTES}
TRAIN_STEPS=${TRAIN_STEPS:-100000}
GENERAL_STEPS=${GENERAL_STEPS:-$TRAIN_STEPS}
FINETUNE_STEPS=${FINETUNE_STEPS:-$TRAIN_STEPS}
ALONE_STEPS=${ALONE_STEPS:-$TRAIN_STEPS}
EMA_STEPS=${EMA_STEPS:-$TRAIN_STEPS}
HPARAMS=${HPARAMS:-multi30k}
EMA_DECAY=${EMA_DECAY:-0.999}
PATIENCE=${PATIENCE:-3000}                # updates without a better dev BLEU before stopping
DECODE_LINES=${DECODE_LINES:-0}           # > 0: decode only the first N test lines (smoke runs)
EVAL_BLEU_EXAMPLES=${EVAL_BLEU_EXAMPLES:-100}  # dev pairs decoded for BLEU at each evaluation
for stage in $STAGES; do
  case "$stage" in
    general|finetuned|alone|ema|table) ;;
    *) echo "STAGES: unknown stage $stage (general finetuned alone ema table)" >&2; exit 2 ;;
  esac
done
case "$CORPUS" in
  tatoeba) GENERAL="$SHARED/tatoeba" ;;
  europarl) GENERAL="$SHARED/europarl_sample" ;;
  *) echo "CORPUS must be tatoeba or europarl, got $CORPUS" >&2; exit 2 ;;
esac
[ -f "$SHARED/multi30k/train.en" ] && [ -f "$GENERAL/train.en" ] || {
  echo "needs $SHARED/multi30k and $GENERAL (see ../shared/data/README.md)" >&2; exit 2; }
. .venv/bin/activate
export TF_CPP_MIN_LOG_LEVEL=2 TF_ENABLE_ONEDNN_OPTS=1
mkdir -p "$OUT/bleu"
SHARED_ABS=$(cd "$SHARED" && pwd); GENERAL_ABS=$(cd "$GENERAL" && pwd)
CPU=$(python -m t2t_lite.cpu)  # e.g. "AMD EPYC (Zen 3), 2 cores, AVX2" (t2t_lite/cpu.py reads /proc/cpuinfo)

# The general corpus under Multi30k's file names: its own training text, Multi30k's dev and test
# (dev BLEU during pretraining is in-domain, as a user fine-tuning would watch it).
RAW_GENERAL="$OUT/raw_$CORPUS"
mkdir -p "$RAW_GENERAL"
for lang in en de; do
  ln -sf "$GENERAL_ABS/train.$lang" "$RAW_GENERAL/train.$lang"
  for split in val test_2016_flickr; do
    ln -sf "$SHARED_ABS/multi30k/$split.$lang" "$RAW_GENERAL/$split.$lang"
  done
done
RAW_M30K="$SHARED/multi30k"
TEST_EN="$RAW_M30K/test_2016_flickr.en"; TEST_DE="$RAW_M30K/test_2016_flickr.de"
if [ "$DECODE_LINES" -gt 0 ]; then
  head -n "$DECODE_LINES" "$TEST_EN" > "$OUT/test.en"; head -n "$DECODE_LINES" "$TEST_DE" > "$OUT/test.de"
  TEST_EN="$OUT/test.en"; TEST_DE="$OUT/test.de"
fi
LINES=$(wc -l < "$TEST_EN")

COMMON=(--problem=translate_ende_multi30k --save_checkpoints_steps=200 --keep_checkpoint_max=10
        --eval_every=600 --eval_steps=20 --log_every=100 --decode_hparams=extra_length=50)
done_file() { echo "$OUT/$1/stage_done.txt"; }
finished() { [ -f "$(done_file "$1")" ]; }
train() {  # train DIR MINUTES STEPS FLAGS...: trains OUT/DIR unless finished, records it
  local dir=$1 minutes=$2 steps=$3; shift 3
  if finished "$dir"; then
    echo "$dir: finished before ($(cat "$(done_file "$dir")")); skipped"
    return
  fi
  local start; start=$(date +%s)
  t2t-lite-trainer "${COMMON[@]}" --output_dir="$OUT/$dir" --train_minutes="$minutes" \
    --train_steps="$steps" "$@"
  local reached
  reached=$(sed -n 's/^model_checkpoint_path: ".*ckpt-\([0-9]*\)"$/\1/p' "$OUT/$dir/checkpoint")
  echo "minutes $minutes, max steps $steps: $reached updates, training wall time" \
       "$(( $(date +%s) - start )) s; $(date -u +%Y-%m-%d), $CPU" > "$OUT/$dir/.stage_done.tmp"
  mv "$OUT/$dir/.stage_done.tmp" "$(done_file "$dir")"
  echo "$dir: $(cat "$(done_file "$dir")")"
}
bleu() {  # bleu MODEL_DIR NAME: sacreBLEU of the test set, decoded once (cached in OUT/bleu)
  local cache="$OUT/bleu/$2.$LINES"
  if [ ! -s "$cache" ]; then
    t2t-lite-decoder --output_dir="$1" --decode_from_file="$TEST_EN" --decode_to_file="$OUT/bleu/$2.hyp.de" \
      --decode_hparams="beam_size=4,alpha=0.6,extra_length=50,batch_size=64" 2>"$OUT/bleu/$2.decode.log"
    python -m sacrebleu "$TEST_DE" -i "$OUT/bleu/$2.hyp.de" -b > "$cache.tmp"
    mv "$cache.tmp" "$cache"
  fi
  cat "$cache"
}
GENERAL_DIR="general_$CORPUS"; TUNED_DIR="finetuned_$CORPUS"
ALONE_DIR=multi30k_alone; EMA_DIR=multi30k_ema

for stage in $STAGES; do
  case "$stage" in
    general)
      train "$GENERAL_DIR" "$PRETRAIN_MINUTES" "$GENERAL_STEPS" --raw_data_dir="$RAW_GENERAL" \
        --data_dir="$DATA/$CORPUS" --hparams="$HPARAMS,eval_bleu_examples=$EVAL_BLEU_EXAMPLES"
      bleu "$OUT/$GENERAL_DIR" general >/dev/null ;;
    finetuned)
      finished "$GENERAL_DIR" || {
        echo "stage finetuned needs the general model: run STAGES=general first (same OUT)" >&2; exit 2; }
      train "$TUNED_DIR" "$TRAIN_MINUTES" "$FINETUNE_STEPS" --raw_data_dir="$RAW_M30K" \
        --data_dir="$DATA/multi30k_ft" --warm_start_from="$OUT/$GENERAL_DIR" \
        --hparams="eval_bleu_examples=$EVAL_BLEU_EXAMPLES"
      bleu "$OUT/$TUNED_DIR" finetuned >/dev/null ;;
    alone)  # and the recipe's average of the last 5 checkpoints, the best one, the 5 ending at it
      train "$ALONE_DIR" "$ALONE_MINUTES" "$ALONE_STEPS" --raw_data_dir="$RAW_M30K" \
        --data_dir="$DATA/multi30k" --hparams="$HPARAMS,eval_bleu_examples=$EVAL_BLEU_EXAMPLES" \
        --eval_early_stopping_steps="$PATIENCE"
      [ -f "$OUT/${ALONE_DIR}_last5/checkpoint" ] || t2t-lite-avg-checkpoints --output_dir="$OUT/$ALONE_DIR" \
        --num_last_checkpoints=5 --avg_dir="$OUT/${ALONE_DIR}_last5"
      [ -f "$OUT/${ALONE_DIR}_best5/checkpoint" ] || t2t-lite-avg-checkpoints --output_dir="$OUT/$ALONE_DIR" \
        --num_last_checkpoints=5 --end_at_best --avg_dir="$OUT/${ALONE_DIR}_best5"
      for model in "$ALONE_DIR:alone_last" "${ALONE_DIR}_last5:alone_last5" "$ALONE_DIR/best:alone_best" \
                   "${ALONE_DIR}_best5:alone_best5"; do
        bleu "$OUT/${model%%:*}" "${model##*:}" >/dev/null
      done ;;
    ema)
      train "$EMA_DIR" "$EMA_MINUTES" "$EMA_STEPS" --raw_data_dir="$RAW_M30K" --data_dir="$DATA/multi30k" \
        --hparams="$HPARAMS,eval_bleu_examples=$EVAL_BLEU_EXAMPLES,weight_ema_decay=$EMA_DECAY"
      bleu "$OUT/$EMA_DIR" ema >/dev/null ;;
  esac
done

echo "== in-domain sacreBLEU on test_2016_flickr ($LINES lines), beam 4, alpha 0.6; the stages finished in $OUT =="
for dir in "$GENERAL_DIR" "$TUNED_DIR" "$ALONE_DIR" "$EMA_DIR"; do
  finished "$dir" && echo "$dir: $(cat "$(done_file "$dir")")"
done
if finished "$GENERAL_DIR"; then
  echo "general ($CORPUS), no fine-tuning: $(bleu "$OUT/$GENERAL_DIR" general)"
fi
if finished "$TUNED_DIR"; then
  echo "general ($CORPUS) fine-tuned on Multi30k (last checkpoint): $(bleu "$OUT/$TUNED_DIR" finetuned)"
fi
if finished "$ALONE_DIR"; then
  best_step=$(python3 -c "import json; print(json.load(open('$OUT/$ALONE_DIR/best/best.json'))['step'])")
  echo "Multi30k alone (last checkpoint): $(bleu "$OUT/$ALONE_DIR" alone_last)"
  echo "Multi30k alone, average of the last 5 (the recipe): $(bleu "$OUT/${ALONE_DIR}_last5" alone_last5)"
  echo "Multi30k alone, best/ by dev BLEU (step $best_step): $(bleu "$OUT/$ALONE_DIR/best" alone_best)"
  echo "Multi30k alone, average of the 5 ending at best/: $(bleu "$OUT/${ALONE_DIR}_best5" alone_best5)"
fi
if finished "$EMA_DIR"; then
  echo "Multi30k, EMA of the weights (decay $EMA_DECAY, last checkpoint): $(bleu "$OUT/$EMA_DIR" ema)"
fi
