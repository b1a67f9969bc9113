#!/usr/bin/env bash
# Fine-tuning on a 2-core CPU (docs/fine-tuning.md): a general EN-DE model trained on a larger
# corpus (Tatoeba, 170k pairs; or Europarl's 20k-line sample), fine-tuned on Multi30k with
# --warm_start_from, against a model trained on Multi30k alone for the same total minutes; then,
# on that Multi30k-alone run, the best checkpoint (early stopping on dev BLEU) and a run with a
# moving average of the weights against the Multi30k recipe's average of the last 5 checkpoints.
# Prints the in-domain sacreBLEU (test_2016_flickr, beam 4, alpha 0.6) of each.
#
#   bash scripts/finetune_recipe.sh        # the figures: 165 minutes of training budgets; run it alone
#   TRAIN_STEPS=4 TRAIN_MINUTES=0.5 PRETRAIN_MINUTES=0.5 DECODE_LINES=4 EVAL_BLEU_EXAMPLES=4 \
#       OUT=/tmp/ft_smoke bash scripts/finetune_recipe.sh  # a smoke run: checks it runs, no figures
#
# PRETRAIN_MINUTES: the general model; TRAIN_MINUTES: the fine-tuning; the Multi30k-alone and EMA
# runs get PRETRAIN_MINUTES + TRAIN_MINUTES each. TRAIN_STEPS caps every run's updates as well.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED_DATA:-../shared/data}
CORPUS=${CORPUS:-tatoeba}                 # tatoeba | europarl
OUT=${OUT:-runs/finetune}
DATA=${DATA_DIR:-$OUT/data}
PRETRAIN_MINUTES=${PRETRAIN_MINUTES:-30}
TRAIN_MINUTES=${TRAIN_MINUTES:-25}
TRAIN_STEPS=${TRAIN_STEPS:-100000}
HPARAMS=${HPARAMS:-multi30k}
EMA_DECAY=${EMA_DECAY:-0.999}
PATIENCE=${PATIENCE:-3000}                # updates without a better dev BLEU before stopping
DECODE_LINES=${DECODE_LINES:-0}           # > 0: decode only the first N test lines (smoke runs)
EVAL_BLEU_EXAMPLES=${EVAL_BLEU_EXAMPLES:-100}  # dev pairs decoded for BLEU at each evaluation
TOTAL_MINUTES=$(python3 -c "print($PRETRAIN_MINUTES + $TRAIN_MINUTES)")
case "$CORPUS" in
  tatoeba) GENERAL="$SHARED/tatoeba" ;;
  europarl) GENERAL="$SHARED/europarl_sample" ;;
  *) echo "CORPUS must be tatoeba or europarl, got $CORPUS" >&2; exit 2 ;;
esac
[ -f "$SHARED/multi30k/train.en" ] && [ -f "$GENERAL/train.en" ] || {
  echo "needs $SHARED/multi30k and $GENERAL (see ../shared/data/README.md)" >&2; exit 2; }
. .venv/bin/activate
export TF_CPP_MIN_LOG_LEVEL=2 TF_ENABLE_ONEDNN_OPTS=1
mkdir -p "$OUT"
SHARED_ABS=$(cd "$SHARED" && pwd); GENERAL_ABS=$(cd "$GENERAL" && pwd)

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

COMMON=(--problem=translate_ende_multi30k --train_steps="$TRAIN_STEPS" --save_checkpoints_steps=200
        --keep_checkpoint_max=10 --eval_every=600 --eval_steps=20 --log_every=100
        --decode_hparams=extra_length=50)
train() {  # train NAME MINUTES FLAGS...: OUT/NAME, wall time printed
  local name=$1 minutes=$2; shift 2
  local start; start=$(date +%s)
  t2t-lite-trainer "${COMMON[@]}" --output_dir="$OUT/$name" --train_minutes="$minutes" "$@"
  echo "$name: training wall time $(( $(date +%s) - start )) s"
}
bleu() {  # bleu MODEL_DIR_OR_CHECKPOINT_DIR NAME: decodes the test set, prints sacreBLEU
  t2t-lite-decoder --output_dir="$1" --decode_from_file="$TEST_EN" --decode_to_file="$OUT/$2.hyp.de" \
    --decode_hparams="beam_size=4,alpha=0.6,extra_length=50,batch_size=64" 2>"$OUT/$2.decode.log"
  python -m sacrebleu "$TEST_DE" -i "$OUT/$2.hyp.de" -b
}

# 1. Fine-tuning against Multi30k alone.
train "general_$CORPUS" "$PRETRAIN_MINUTES" --raw_data_dir="$RAW_GENERAL" --data_dir="$DATA/$CORPUS" \
  --hparams="$HPARAMS,eval_bleu_examples=$EVAL_BLEU_EXAMPLES"
train finetuned "$TRAIN_MINUTES" --raw_data_dir="$RAW_M30K" --data_dir="$DATA/multi30k_ft" \
  --warm_start_from="$OUT/general_$CORPUS" --hparams="eval_bleu_examples=$EVAL_BLEU_EXAMPLES"
train multi30k_alone "$TOTAL_MINUTES" --raw_data_dir="$RAW_M30K" --data_dir="$DATA/multi30k" \
  --hparams="$HPARAMS,eval_bleu_examples=$EVAL_BLEU_EXAMPLES" --eval_early_stopping_steps="$PATIENCE"
# 2. The Multi30k recipe's average of the last 5 checkpoints, the best one, the window ending at
#    the best, and the moving average of the weights.
t2t-lite-avg-checkpoints --output_dir="$OUT/multi30k_alone" --num_last_checkpoints=5 \
  --avg_dir="$OUT/multi30k_alone_last5"
t2t-lite-avg-checkpoints --output_dir="$OUT/multi30k_alone" --num_last_checkpoints=5 --end_at_best \
  --avg_dir="$OUT/multi30k_alone_best5"
train multi30k_ema "$TOTAL_MINUTES" --raw_data_dir="$RAW_M30K" --data_dir="$DATA/multi30k" \
  --hparams="$HPARAMS,eval_bleu_examples=$EVAL_BLEU_EXAMPLES,weight_ema_decay=$EMA_DECAY"

echo "== in-domain sacreBLEU on test_2016_flickr ($(wc -l < "$TEST_EN") lines), beam 4, alpha 0.6 =="
echo "general ($CORPUS, ${PRETRAIN_MINUTES} min), no fine-tuning: $(bleu "$OUT/general_$CORPUS" general)"
echo "fine-tuned on Multi30k (+${TRAIN_MINUTES} min, last checkpoint): $(bleu "$OUT/finetuned" finetuned)"
echo "Multi30k alone (${TOTAL_MINUTES} min, last checkpoint): $(bleu "$OUT/multi30k_alone" alone_last)"
echo "Multi30k alone, average of the last 5 (the recipe): $(bleu "$OUT/multi30k_alone_last5" alone_last5)"
echo "Multi30k alone, best/ by dev BLEU (step $(python3 -c "import json; print(json.load(open('$OUT/multi30k_alone/best/best.json'))['step'])")): $(bleu "$OUT/multi30k_alone/best" alone_best)"
echo "Multi30k alone, average of the 5 ending at best/: $(bleu "$OUT/multi30k_alone_best5" alone_best5)"
echo "Multi30k, EMA of the weights (decay $EMA_DECAY, ${TOTAL_MINUTES} min, last checkpoint): $(bleu "$OUT/multi30k_ema" ema)"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; $(date -u +%Y-%m-%d)"
