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
#
# Eight minutes are a tenth to a third of the full recipe's updates, depending on the CPU, so the
# quickstart sets three things of the recipe for that budget, chosen on the val split
# (docs/getting-started.md): batches of 2,048 tokens, not 4,096 (1.9 times the updates in the
# same minutes, which a short run gains more from than from bigger batches); warmup 400 updates,
# not the set's 1,000, at the same peak learning rate, 5e-3 (learning_rate_constant = 5e-3 *
# sqrt(128 * 400) = 1.1314); and the average of the last 2 checkpoints, not 5 (at 200 apart, 5
# reach back into the warmup of a short run). One model: two at once pay only from the full recipe's
# minutes on (ENSEMBLE=auto, docs/training.md).
set -euo pipefail
cd "$(dirname "$0")/.."
export TRAIN_MINUTES=${TRAIN_MINUTES:-8} OUT=${OUT:-runs/quickstart}
export HPARAMS=${HPARAMS:-multi30k_tiny,batch_size=2048,learning_rate_warmup_steps=400,learning_rate_constant=1.1314}
export AVERAGE=${AVERAGE:-2} ENSEMBLE=${ENSEMBLE:-1}
if [ -e "$OUT/hparams.json" ]; then  # the trainer would resume it, or refuse other settings
  echo "error: $OUT holds an earlier run; the quickstart trains from scratch. Move it away" \
       "(mv $OUT $OUT.old) or choose another folder (OUT=runs/quickstart2 bash scripts/quickstart.sh)" >&2
  exit 2
fi
bash scripts/multi30k_recipe.sh
. .venv/bin/activate
printf '%s\n' "A man in a red shirt is riding a bicycle down the street ." \
              "Two children are playing with a dog on the beach ." \
              "A woman is reading a book in the park ." |
  t2t-lite-decoder --output_dir="$OUT/averaged" --decode_hparams=beam_size=4,alpha=1.2,extra_length=50
