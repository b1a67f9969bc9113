#!/usr/bin/env bash
# The paper's WMT14 EN-DE runs, with the real commands:
#
#   bash scripts/wmt14_recipe.sh base 8gpu          # one machine, 8 GPUs, MirroredStrategy
#   bash scripts/wmt14_recipe.sh big 8gpu
#   bash scripts/wmt14_recipe.sh base 1gpu          # one GPU, gradient accumulation x8 (= 8 GPUs)
#   TF_CONFIG=... bash scripts/wmt14_recipe.sh big multiworker   # on every machine, see docs/wmt14-gpus.md
#
# Each trains the paper's post-norm set (transformer_base_v1 / transformer_big_v1; 4096 tokens per
# GPU, so 8 GPUs or accumulation x8 give the paper's ~25k-token batches; TFDS downloads WMT14 on
# first use), average the last 5 (base) / 20 (big)
# checkpoints, beam-decode newstest2014 (beam 4, alpha 0.6) and print sacreBLEU and the paper's
# tokenized BLEU. NEWSTEST_DIR must hold newstest2014.en/.de (sacrebleu -t wmt14/full -l en-de
# --echo src/ref writes them).
#
# DRY_RUN=1 runs the same commands on tiny settings here: a tiny hparams override, a few steps,
# no GPU flags (none here), and local newstest files standing in for the training data
# (--raw_data_dir: newstest2012+2015-2017 as train, newstest2013 dev, newstest2014 test), written
# to a new temporary folder, or to STAND_IN_DIR (runs that share it share a vocabulary in DATA_DIR).
# DRY_RUN_TRAIN_ONLY=1 with it stops after the trainer command: the rest (average, decode, score) is
# the same commands in every mode, and tests/test_end_to_end.py runs it once, as the multiworker
# dry run's chief.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-base}
MODE=${2:-8gpu}
DATA=${DATA_DIR:-$HOME/t2t_data}
OUT=${OUT:-runs/wmt14_${MODEL}_${MODE}}
NEWSTEST=${NEWSTEST_DIR:-../shared/data/wmt14}
case "$MODEL" in
  base) STEPS=100000; AVG=5 ;;
  big) STEPS=300000; AVG=20 ;;
  *) echo "usage: $0 base|big 8gpu|1gpu|multiworker" >&2; exit 2 ;;
esac
case "$MODE" in
  8gpu) DEVICES="--worker_gpu=8"; HP="" ;;
  1gpu) DEVICES="--worker_gpu=1"; HP=",gradient_accumulation_steps=8" ;;  # 8 x batch per update
  multiworker) DEVICES=""; HP="" ;;  # TF_CONFIG names the workers; each uses all its GPUs
  *) echo "usage: $0 base|big 8gpu|1gpu|multiworker" >&2; exit 2 ;;
esac
RAW=()
DECODE_LINES=0
if [ "${DRY_RUN:-0}" = 1 ]; then
  STEPS=4; AVG=2; DEVICES=""; DECODE_LINES=20
  HP="$HP,hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1,batch_size=512,max_length=64,eval_bleu_examples=5"
  STAND_IN=${STAND_IN_DIR:-$(mktemp -d)}
  mkdir -p "$STAND_IN"
  for lang in en de; do  # each file written aside, then renamed: runs sharing the folder read whole files
    cat ../shared/data/wmt14/newstest201{2,5,6,7}.$lang > "$STAND_IN/.train.$lang.$$"
    mv "$STAND_IN/.train.$lang.$$" "$STAND_IN/train.$lang"
    for year in 2013 2014; do
      cp ../shared/data/wmt14/newstest$year.$lang "$STAND_IN/.newstest$year.$lang.$$"
      mv "$STAND_IN/.newstest$year.$lang.$$" "$STAND_IN/newstest$year.$lang"
    done
  done
  RAW=(--raw_data_dir="$STAND_IN")
  DATA=${DATA_DIR:-$STAND_IN/t2t_data}
  OUT=${OUT_DRY:-$STAND_IN/model}
fi
[ -d .venv ] && . .venv/bin/activate
export TF_CPP_MIN_LOG_LEVEL=2
t2t-lite-trainer --problem=translate_ende --hparams="${MODEL}_v1$HP" $DEVICES "${RAW[@]}" \
  --data_dir="$DATA" --output_dir="$OUT" --train_steps="$STEPS" \
  --save_checkpoints_steps=$(( STEPS < 1000 ? 2 : 1000 )) --keep_checkpoint_max=20 --eval_steps=2
# With several workers, the chief (worker 0) owns the model directory and does the rest.
if [ "$MODE" = multiworker ] && ! python -c 'import json, os, sys; t = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}); sys.exit(0 if t.get("type") == "chief" or (t.get("type") == "worker" and t.get("index") == 0) else 1)'; then
  echo "not the chief: done after training"
  exit 0
fi
if [ "${DRY_RUN:-0}" = 1 ] && [ "${DRY_RUN_TRAIN_ONLY:-0}" = 1 ]; then
  echo "dry run: trained; not averaging, decoding or scoring (DRY_RUN_TRAIN_ONLY=1)"
  exit 0
fi
t2t-lite-avg-checkpoints --output_dir="$OUT" --num_last_checkpoints="$AVG" --avg_dir="$OUT/averaged"
SOURCE="$NEWSTEST/newstest2014.en"; REFERENCE="$NEWSTEST/newstest2014.de"
if [ "$DECODE_LINES" -gt 0 ]; then
  head -n "$DECODE_LINES" "$SOURCE" > "$OUT/src.en"; head -n "$DECODE_LINES" "$REFERENCE" > "$OUT/ref.de"
  SOURCE="$OUT/src.en"; REFERENCE="$OUT/ref.de"
fi
t2t-lite-decoder --output_dir="$OUT/averaged" --decode_from_file="$SOURCE" \
  --decode_to_file="$OUT/newstest2014.hyp.de" --decode_hparams="beam_size=4,alpha=0.6,extra_length=50,batch_size=32"
t2t-lite-bleu --translation="$OUT/newstest2014.hyp.de" --reference="$REFERENCE" --lang=de
