# The Multi30k recipe's settings and steps, sourced (never run) by multi30k_recipe.sh and
# multi30k_tune.sh, so that a tuning run trains, averages and decodes exactly as the recipe does.
# Sourcing it moves to the repository root, sets up .venv and reads, from the environment:
#
#   RAW_DATA_DIR   train/val/test_2016_flickr .en/.de (../shared/data/multi30k); without them the
#                  problem downloads Multi30k's public files into DATA_DIR/multi30k
#   DATA_DIR       the vocabulary (t2t_data)
#   HPARAMS        hparams set and overrides (multi30k_tiny, tuned on val: docs/training.md), e.g.
#                  multi30k_tiny,dropout=0.3; multi30k is the wider set the recipe used before.
#                  An item problem=NAME picks the problem instead of translate_ende_multi30k (8,000
#                  BPE pieces), e.g. multi30k,problem=translate_ende_multi30k4k (4,000 pieces)
#   TRAIN_MINUTES  wall-time budget of the training (55); TRAIN_STEPS=N trains N updates instead
#                  (a rerun then resumes from the last checkpoint)
#   SAVE_STEPS     updates between checkpoints (200); one is also saved at the end
#   AVERAGE        how many of the newest checkpoints to average (5)
#   DECODE         the beam search (beam_size=4,alpha=1.2, tuned on val); extra_length=50,
#                  batch_size=64 always
#   ENSEMBLE       how many models to train at once and decode as one (1): member i in
#                  OUT/member_i with seed=i (member 0 HPARAMS' own), each on a core of its own
#                  where there are as many; their averages decoded together (--ensemble_dirs)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RAW=${RAW_DATA_DIR:-../shared/data/multi30k}
DATA=${DATA_DIR:-t2t_data}
MINUTES=${TRAIN_MINUTES:-55}
STEPS=${TRAIN_STEPS:-}
HPARAMS=${HPARAMS:-multi30k_tiny}
SAVE_STEPS=${SAVE_STEPS:-200}
AVERAGE=${AVERAGE:-5}
KEEP_CHECKPOINTS=${KEEP_CHECKPOINTS:-$(( AVERAGE > 10 ? AVERAGE : 10 ))}
DECODE=${DECODE:-beam_size=4,alpha=1.2}
ENSEMBLE=${ENSEMBLE:-1}
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

# multi30k_budget: the training budget in words, e.g. "55 min" or "1500 steps".
multi30k_budget() {
  if [ -n "$STEPS" ]; then echo "$STEPS steps"; else echo "$MINUTES min"; fi
}

# multi30k_train OUT [more trainer flags]: train HPARAMS into OUT for the budget, a checkpoint
# every SAVE_STEPS updates, dev loss every 600 and dev BLEU (greedy, 200 val sentences) with it.
multi30k_train() {
  local out=$1
  shift
  local budget=(--train_steps=100000 --train_minutes="$MINUTES")
  [ -n "$STEPS" ] && budget=(--train_steps="$STEPS")
  local items item problem=translate_ende_multi30k hparams=()
  IFS=, read -ra items <<< "$HPARAMS"
  for item in "${items[@]}"; do
    case $item in
      problem=*) problem=${item#problem=} ;;
      *) hparams+=("$item") ;;
    esac
  done
  t2t-lite-trainer --problem="$problem" "${RAW_FLAG[@]}" --data_dir="$DATA" \
    --hparams="$(IFS=,; echo "${hparams[*]}")" --output_dir="$out" "${budget[@]}" \
    --save_checkpoints_steps="$SAVE_STEPS" --keep_checkpoint_max="$KEEP_CHECKPOINTS" \
    --eval_every=600 --eval_steps=20 --log_every=100 --decode_hparams=extra_length=50 "$@"
}

# multi30k_members OUT: the model directories of the ENSEMBLE members under OUT, one a line (OUT
# itself for one model).
multi30k_members() {
  if [ "$ENSEMBLE" -le 1 ]; then
    echo "$1"
    return
  fi
  local i
  for ((i = 0; i < ENSEMBLE; i++)); do echo "$1/member_$i"; done
}

# multi30k_members_pinned: whether multi30k_train_members pins each ENSEMBLE member to a core of
# its own (taskset is there and the machine has a core per member).
multi30k_members_pinned() {
  command -v taskset > /dev/null && [ "$(nproc)" -ge "$ENSEMBLE" ]
}

# multi30k_train_members OUT [more trainer flags]: multi30k_train of every ENSEMBLE member at once
# (one model: OUT itself, in the foreground) into the directories multi30k_members names, member
# i's log beside its directory (OUT/member_i.log), each pinned to core i (taskset)
# where the machine has a core per member, so each trains on one core, as the others do; fails if
# any failed.
multi30k_train_members() {
  local out=$1
  shift
  if [ "$ENSEMBLE" -le 1 ]; then
    multi30k_train "$out" "$@"
    return
  fi
  mkdir -p "$out"
  local members i pids=() pin=0
  mapfile -t members < <(multi30k_members "$out")
  multi30k_members_pinned && pin=1
  for i in "${!members[@]}"; do
    (
      [ "$pin" = 1 ] && taskset -cp "$i" "$BASHPID" > /dev/null
      [ "$i" -gt 0 ] && HPARAMS="$HPARAMS,seed=$i"
      multi30k_train "${members[$i]}" "$@"
    ) > "${members[$i]}.log" 2>&1 &
    pids+=($!)
  done
  echo "training $ENSEMBLE models at once$([ "$pin" = 1 ] && echo ", one a core"): logs in ${members[*]/%/.log}"
  local failed=0
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { echo "member $i failed: see ${members[$i]}.log" >&2; failed=1; }
  done
  for i in "${!members[@]}"; do grep -E "^(done|time budget)" "${members[$i]}.log" | tail -1 || true; done
  return $failed
}

# multi30k_training_path OUT [summary]: the precision and XLA the last training into OUT took, as
# the trainer recorded them (hparams.json's training_path; the multi30k hparams leave both to the
# machine, "auto"), e.g. "float32, XLA forward/backward (AVX2 CPU without AVX512_BF16/AMX)"; with
# "summary", without the reason in parentheses.
multi30k_training_path() {
  python3 -c 'import json, sys
try:
  with open(sys.argv[1], encoding="utf-8") as f:
    path = json.load(f)["training_path"]
  print(path["summary"] + ("" if sys.argv[2] == "summary" else " (" + path["reason"] + ")"))
except (OSError, KeyError, ValueError):
  print("not recorded")' "$1/hparams.json" "${2:-}"
}

# multi30k_average OUT AVG_DIR [CHECKPOINTS]: average the newest AVERAGE checkpoints of OUT (or
# the comma-separated checkpoint names given, e.g. ckpt-1400,ckpt-1498) into AVG_DIR.
multi30k_average() {
  local which=(--num_last_checkpoints="$AVERAGE")
  [ -n "${3:-}" ] && which=(--checkpoints="$3" --prefix="$1/")
  t2t-lite-avg-checkpoints --output_dir="$1" "${which[@]}" --avg_dir="$2"
}

# multi30k_decode MODEL_DIR[,MODEL_DIR...] SOURCE TRANSLATION [DECODE]: beam-decode SOURCE with
# the latest checkpoint of MODEL_DIR (of several, as one ensemble).
multi30k_decode() {
  local first=${1%%,*} ensemble=()
  [ "$first" != "$1" ] && ensemble=(--ensemble_dirs="${1#*,}")
  t2t-lite-decoder --output_dir="$first" "${ensemble[@]}" --decode_from_file="$2" \
    --decode_to_file="$3" --decode_hparams="${4:-$DECODE},extra_length=50,batch_size=64"
}
