#!/usr/bin/env bash
# T2T's README walkthrough (github.com/tensorflow/tensor2tensor, "Walkthrough") with only the
# command names changed (t2t-X -> t2t-lite-X), on Multi30k EN-DE read from local files
# (--raw_data_dir) instead of WMT, and a short run: TRAIN_STEPS (default 100) of transformer_tiny
# instead of T2T's 250,000-step default with transformer_base_single_gpu (HPARAMS=... changes it).
# Every command is echoed before it runs, so the output is the transcript docs/t2t-users.md shows.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh runtime
. .venv/bin/activate
# Multi30k's files: RAW_DATA_DIR, else ../shared/data/multi30k where it exists; without either
# the problem downloads Multi30k's public files into the walkthrough's DATA_DIR.
RAW_DATA_DIR=${RAW_DATA_DIR:-../shared/data/multi30k}
if [ -f "$RAW_DATA_DIR/train.en" ]; then
  RAW_DATA_DIR=$(cd "$RAW_DATA_DIR" && pwd)
  RAW_FLAG="--raw_data_dir=$RAW_DATA_DIR"
else
  echo "no Multi30k files in $RAW_DATA_DIR: the problem downloads the public ones" >&2
  RAW_FLAG=""
fi
WORK=${WORK:-runs/t2t_walkthrough}
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"   # a fresh start: the walkthrough appends below
set -x

# See what problems, models, and hyperparameter sets are available.
t2t-lite-trainer --registry_help | head -5

PROBLEM=translate_ende_multi30k
MODEL=transformer
HPARAMS=${HPARAMS:-transformer_tiny}

DATA_DIR=$PWD/t2t_data
TMP_DIR=/tmp/t2t_datagen
TRAIN_DIR=$PWD/t2t_train/$PROBLEM/$MODEL-$HPARAMS

mkdir -p $DATA_DIR $TMP_DIR $TRAIN_DIR

# Generate data
t2t-lite-datagen \
  --data_dir=$DATA_DIR \
  --tmp_dir=$TMP_DIR \
  --problem=$PROBLEM \
  $RAW_FLAG | tail -3

# Train
t2t-lite-trainer \
  --data_dir=$DATA_DIR \
  --problem=$PROBLEM \
  --model=$MODEL \
  --hparams_set=$HPARAMS \
  --output_dir=$TRAIN_DIR \
  $RAW_FLAG \
  --train_steps=${TRAIN_STEPS:-100}

# Decode

DECODE_FILE=$DATA_DIR/decode_this.txt
echo "Hello world" >> $DECODE_FILE
echo "Goodbye world" >> $DECODE_FILE
echo -e 'Hallo Welt\nAuf Wiedersehen Welt' > ref-translation.de

BEAM_SIZE=4
ALPHA=0.6

t2t-lite-decoder \
  --data_dir=$DATA_DIR \
  --problem=$PROBLEM \
  --model=$MODEL \
  --hparams_set=$HPARAMS \
  --output_dir=$TRAIN_DIR \
  --decode_hparams="beam_size=$BEAM_SIZE,alpha=$ALPHA" \
  --decode_from_file=$DECODE_FILE \
  --decode_to_file=translation.en

# See the translations
cat translation.en

# Evaluate the BLEU score
t2t-lite-bleu --translation=translation.en --reference=ref-translation.de
