#!/usr/bin/env bash
# Tunes the Multi30k recipe on the val split (all 1,014 lines; never test_2016_flickr). Each
# setting trains with the recipe's own training (scripts/multi30k_common.sh, also sourced by
# multi30k_recipe.sh) for the same budget, averages checkpoints as the recipe would, beam-decodes
# val and scores it with sacreBLEU, then appends a row to TABLE (scripts/multi30k_tuning.tsv).
# A setting already in the table (same name and budget) is skipped, so the list can be worked
# through over several sessions; settings that differ only at decode time (checkpoints averaged,
# beam, alpha) reuse the training of the one before them.
#
#   bash scripts/multi30k_tune.sh list              # the settings and what is done of each
#   MAX_TRAININGS=1 bash scripts/multi30k_tune.sh   # at most one new training this time
#   ONLY="warmup400 warmup400_beam8" bash scripts/multi30k_tune.sh
#   TRAIN_STEPS=1500 bash scripts/multi30k_tune.sh  # budget in updates instead of TRAIN_MINUTES
#   SMOKE=1 bash scripts/multi30k_tune.sh           # tiny model, 20 updates, 20 val lines
#
# Run it alone on the machine: with TRAIN_MINUTES (55) the steps a setting reaches depend on
# what else runs. The recipe's variables (multi30k_common.sh) apply: HPARAMS is the set the
# overrides below go on. Also: ROOT (runs/multi30k_tune), where each training is kept, in
# ROOT/<budget>/<hparams>/model; TUNE_SAVE_STEPS (100), the checkpoint interval of every tuning
# run, which each setting's interval must be a multiple of; SETTINGS, to replace the list below.
# An interrupted training starts over with TRAIN_MINUTES and resumes from its last checkpoint
# with TRAIN_STEPS.
set -euo pipefail
shopt -s inherit_errexit

# One setting a line: name, hparams overrides (on HPARAMS; - for none), checkpoints averaged
# IxN (as the recipe's SAVE_STEPS=I AVERAGE=N: the last checkpoint and the newest N-1 before it
# at multiples of I), decode hparams. The recipe's run on the AVX2 EPYC (docs/training.md):
# 1,498 updates in 55 minutes, about 13 epochs of the 29k pairs; dev BLEU 26.2/31.9/37.9 at
# 600/1,200/1,498, still rising steeply; the learning rate warmed up for 1,000 of the 1,498
# updates (peak 2.0e-3 = constant 1 * 1000^-0.5 * 256^-0.5); the average of 5 checkpoints 200
# apart (steps 800-1,498) scored below the last one. Hence, for a run of about 1,500 updates:
# - baseline: the recipe as it is, the row the others compare with.
# - warmup400: a short run should not spend two thirds of itself warming up: peak 3.1e-3 at
#   step 400, the same rsqrt decay as the baseline after step 1,000 (T2T's transformer_base
#   warms up 8000 of 100k+ steps; pre-norm, as here, takes the higher peak).
# - warmup400_batch2048: half the tokens per update, so about twice the updates in the same
#   minutes on a model far from converged (transformer_parsing_cpu does this for its small
#   treebank).
# - warmup400_dropout0.2 (dropout is layer_prepostprocess_dropout): after 13 epochs of a small
#   corpus the last training losses (0.76-1.48, dropout on) are below the dev loss (1.64): more
#   dropout, against overfitting, which a higher learning rate hastens (0.3 next if 0.2 gains).
# - warmup400_layers2: T2T's transformer_small (its d 256, ff 1024, 4 heads, 2+2 layers): about
#   a quarter less compute per update, so more updates in a budget that ends mid-climb.
# - warmup400_lr1.5: learning_rate_constant 1.5, peak 4.7e-3: whether a still higher rate helps.
# Decode time only (on the baseline's and warmup400's runs, no training): checkpoints 100 apart,
# so that the average spans the last 200-400 updates of a model still improving fast; beam 8;
# alpha 1.0 (longer outputs).
DEFAULT_SETTINGS="
baseline              -                                                          200x5  beam_size=4,alpha=0.6
baseline_avg100x5     -                                                          100x5  beam_size=4,alpha=0.6
warmup400             learning_rate_warmup_steps=400                             200x5  beam_size=4,alpha=0.6
warmup400_avg100x3    learning_rate_warmup_steps=400                             100x3  beam_size=4,alpha=0.6
warmup400_avg100x5    learning_rate_warmup_steps=400                             100x5  beam_size=4,alpha=0.6
warmup400_beam8       learning_rate_warmup_steps=400                             200x5  beam_size=8,alpha=0.6
warmup400_alpha1.0    learning_rate_warmup_steps=400                             200x5  beam_size=4,alpha=1.0
warmup400_batch2048   learning_rate_warmup_steps=400,batch_size=2048             200x5  beam_size=4,alpha=0.6
warmup400_dropout0.2  learning_rate_warmup_steps=400,dropout=0.2                 200x5  beam_size=4,alpha=0.6
warmup400_layers2     learning_rate_warmup_steps=400,num_hidden_layers=2         200x5  beam_size=4,alpha=0.6
warmup400_lr1.5       learning_rate_warmup_steps=400,learning_rate_constant=1.5  200x5  beam_size=4,alpha=0.6
"
TRAIN_FLAGS=()
if [ "${SMOKE:-0}" = 1 ]; then  # the whole path, small: a tiny model, 20 updates, 20 val lines
  SETTINGS="
smoke        hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1  10x2  beam_size=1
smoke_beam2  hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1  5x3   beam_size=2,alpha=0.6
"
  export TRAIN_STEPS=20
  TUNE_SAVE_STEPS=5 VAL_LINES=20 ROOT=runs/multi30k_tune_smoke TABLE=runs/multi30k_tune_smoke/tuning.tsv
  TRAIN_FLAGS=(--no_eval_bleu --eval_steps=2)
fi
SETTINGS=${SETTINGS:-$DEFAULT_SETTINGS}
ROOT=${ROOT:-runs/multi30k_tune}
TABLE=${TABLE:-scripts/multi30k_tuning.tsv}
TUNE_SAVE_STEPS=${TUNE_SAVE_STEPS:-100}
MAX_TRAININGS=${MAX_TRAININGS:-1000}
ONLY=${ONLY:-}
VAL_LINES=${VAL_LINES:-}

fail() { echo "error: $*" >&2; exit 2; }
case "${1:-}" in
  ""|list) ;;
  *) fail "unknown argument '$1': give none, or list (see the top of $0)" ;;
esac

# Check the list; keep as many checkpoints as the widest average needs.
keep=10 names=" "
while read -r name overrides checkpoints decode extra; do
  [ -z "$name" ] && continue
  [ -n "$decode" ] && [ -z "${extra:-}" ] ||
    fail "setting '$name': give 4 fields (name, overrides or -, IxN, decode hparams)"
  [[ $names == *" $name "* ]] && fail "setting '$name' is listed twice"
  names+="$name "
  [[ $checkpoints =~ ^([0-9]+)x([0-9]+)$ ]] ||
    fail "setting '$name': checkpoints '$checkpoints' is not IxN (e.g. 200x5)"
  interval=${BASH_REMATCH[1]} count=${BASH_REMATCH[2]}
  (( interval > 0 && count > 0 && interval % TUNE_SAVE_STEPS == 0 )) ||
    fail "setting '$name': the interval $interval must be a positive multiple of" \
      "TUNE_SAVE_STEPS=$TUNE_SAVE_STEPS"
  need=$(( (count - 1) * interval / TUNE_SAVE_STEPS + 1 ))
  (( need > keep )) && keep=$need
done <<< "$SETTINGS"
for name in $ONLY; do [[ $names == *" $name "* ]] || fail "ONLY names '$name', which is not a setting"; done

export SAVE_STEPS=$TUNE_SAVE_STEPS KEEP_CHECKPOINTS=$keep
. "$(dirname "$0")/multi30k_common.sh"
[ "${SMOKE:-0}" = 1 ] && rm -rf "$ROOT"
budget=$(multi30k_budget)

cpu_description() {  # e.g. "AMD EPYC, 2 cores, AVX2" (t2t_lite/cpu.py reads /proc/cpuinfo)
  python -m t2t_lite.cpu
}

commit_description() {  # the commit, +changes when the code differs from it
  local commit
  commit=$(git rev-parse --short HEAD 2>/dev/null) || { echo unknown; return; }
  git diff --quiet HEAD -- t2t_lite hparams problems scripts/multi30k_common.sh || commit+="+changes"
  echo "$commit"
}

in_table() {  # NAME: a row of that setting with this budget
  [ -f "$TABLE" ] &&
    awk -F'\t' -v n="$1" -v b="$budget" '$1 == n && $5 == b {found = 1} END {exit !found}' "$TABLE"
}

# train RUN HPARAMS: the recipe's training into RUN/model, then RUN/trained (steps, minutes,
# CPU, date, commit). A training whose loss became NaN is recorded as diverged.
train() {
  local run=$1 HPARAMS=$2 flags=() start status
  if [ -d "$run/model" ] && [ -z "$STEPS" ]; then  # a time budget starts over
    flags=(--overwrite_output_dir)
    rm -f "$run/train_seconds"
  fi
  mkdir -p "$run"
  echo "== training $HPARAMS ($budget) into $run/model"
  start=$(date +%s)
  set +e
  multi30k_train "$run/model" "${flags[@]}" "${TRAIN_FLAGS[@]}" 2>&1 | tee -a "$run/train.log"
  status=${PIPESTATUS[0]}
  set -e
  echo $(( $(date +%s) - start )) >> "$run/train_seconds"
  local steps
  if [ "$status" = 1 ] && tail -n 5 "$run/train.log" | grep -q "became NaN or infinite"; then
    steps=diverged
  elif [ "$status" != 0 ]; then
    echo "error: the training of $HPARAMS failed (exit $status); rerun to try again" >&2
    exit "$status"
  else
    steps=$(last_step "$run/model")
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$steps" \
    "$(awk '{s += $1} END {printf "%.1f", s / 60}' "$run/train_seconds")" \
    "$(cpu_description); $(multi30k_training_path "$run/model" summary)" "$(date -u +%Y-%m-%d)" \
    "$(commit_description)" > "$run/trained.tmp"
  mv "$run/trained.tmp" "$run/trained"
}

checkpoint_steps() {  # MODEL_DIR: the steps of its checkpoints, ascending
  find "$1" -maxdepth 1 -name 'ckpt-*.index' | sed -E 's/.*ckpt-([0-9]+)\.index$/\1/' | sort -n
}

last_step() { checkpoint_steps "$1" | tail -n 1; }

# pick_checkpoints MODEL_DIR I N: what the recipe averages with SAVE_STEPS=I and AVERAGE=N, out of
# a run saved every TUNE_SAVE_STEPS: the last checkpoint and the newest N-1 before it at multiples
# of I (e.g. 200x5 of a run that stopped at 1,498: ckpt-800,ckpt-1000,ckpt-1200,ckpt-1400,ckpt-1498).
pick_checkpoints() {
  local steps last picked
  steps=$(checkpoint_steps "$1")
  last=$(tail -n 1 <<< "$steps")
  # awk keeps the newest N-1 itself: `| tail -n 0` (N=1) exits unread and awk's SIGPIPE (141)
  # failed the run under pipefail
  picked=$( (awk -v i="$2" -v last="$last" -v n=$(( $3 - 1 )) '$1 < last && $1 % i == 0 {k[c++] = $1}
               END {for (j = (c > n ? c - n : 0); j < c; j++) print k[j]}' <<< "$steps"
             echo "$last") | sed '/^$/d')
  if [ "$(wc -l <<< "$picked")" -ne "$3" ]; then
    echo "error: $1 keeps $(wc -l <<< "$steps") checkpoints, too few for $3 of them $2 steps apart" >&2
    return 1
  fi
  sed 's/^/ckpt-/' <<< "$picked" | paste -sd, -
}

# val_bleu RUN MODEL_DIR TAG DECODE: sacreBLEU of MODEL_DIR's translation of val (kept in RUN, so a
# translation and its score are made once per model and decode setting).
val_bleu() {
  local source=$RAW/val.en reference=$RAW/val.de
  if [ -n "$VAL_LINES" ]; then  # the smoke test's first lines only
    source=$ROOT/val$VAL_LINES.en reference=$ROOT/val$VAL_LINES.de
    if [ ! -f "$reference" ]; then
      head -n "$VAL_LINES" "$RAW/val.en" > "$source"
      head -n "$VAL_LINES" "$RAW/val.de" > "$reference"
    fi
  fi
  local hyp
  hyp=$1/val.$3.$(tr ',=' '+-' <<< "$4").de
  if [ ! -f "$hyp" ]; then
    multi30k_decode "$2" "$source" "$hyp.tmp" "$4" >&2
    mv "$hyp.tmp" "$hyp"
  fi
  if [ ! -f "$hyp.bleu" ]; then
    t2t-lite-bleu --translation="$hyp" --reference="$reference" --lang=de --bleu_variant=none |
      sed -n 's/^sacreBLEU = \([0-9.]*\) .*/\1/p' > "$hyp.bleu.tmp"
    [ -s "$hyp.bleu.tmp" ] || { echo "error: no sacreBLEU score for $hyp" >&2; return 1; }
    mv "$hyp.bleu.tmp" "$hyp.bleu"
  fi
  cat "$hyp.bleu"
}

if [ ! -s "$TABLE" ]; then
  mkdir -p "$(dirname "$TABLE")"
  printf '%s\t' setting hparams checkpoints decode budget steps train_minutes val_bleu_last \
    val_bleu_average cpu date > "$TABLE"
  echo commit >> "$TABLE"
fi
trainings=0
while read -r name overrides checkpoints decode; do
  [ -z "$name" ] && continue
  [ -n "$ONLY" ] && [[ " $ONLY " != *" $name "* ]] && continue
  hparams=$HPARAMS
  [ "$overrides" != - ] && hparams+=,$overrides
  run=$ROOT/${budget// /}/$(tr ',=' '+-' <<< "$hparams")
  if in_table "$name"; then
    state="in $TABLE"
  elif [ -f "$run/trained" ]; then
    state="trained, to decode"
  else
    state="to train ($budget)"
  fi
  if [ "${1:-}" = list ]; then
    printf '%-22s %-26s %s\n' "$name" "$state" "$hparams $checkpoints $decode"
    continue
  fi
  [[ $state == in* ]] && { echo "== $name: already $state"; continue; }
  if [ ! -f "$run/trained" ]; then
    if (( trainings >= MAX_TRAININGS )); then
      echo "== $name: not trained yet, and MAX_TRAININGS=$MAX_TRAININGS trainings ran this time"
      continue
    fi
    trainings=$(( trainings + 1 ))
    rm -rf "$run"/avg_* "$run"/val.*
    train "$run" "$hparams"
  fi
  IFS=$'\t' read -r steps minutes cpu date commit < "$run/trained"
  if [ "$steps" = diverged ]; then
    last=diverged average=diverged
  else
    decoding=$(date +%s)
    last=$(val_bleu "$run" "$run/model" last "$decode")
    average_dir=$run/avg_$checkpoints
    if [ ! -f "$average_dir/checkpoint" ]; then
      picked=$(pick_checkpoints "$run/model" "${checkpoints%x*}" "${checkpoints#*x}")
      multi30k_average "$run/model" "$average_dir" "$picked"
    fi
    average=$(val_bleu "$run" "$average_dir" "avg_$checkpoints" "$decode")
    echo "== $name: val BLEU $last (last checkpoint), $average (average $checkpoints);" \
      "decoding and scoring took $(( $(date +%s) - decoding )) s"
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$hparams" "$checkpoints" "$decode" \
    "$budget" "$steps" "$minutes" "$last" "$average" "$cpu" "$date" "$commit" >> "$TABLE"
done <<< "$SETTINGS"
[ "${1:-}" = list ] || echo "table: $TABLE"
