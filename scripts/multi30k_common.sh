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
#   ENSEMBLE       how many models to train at once and decode as one (auto): member i in
#                  OUT/member_i with seed=i (member 0 HPARAMS' own), each on cores of its own
#                  where there are as many; their averages decoded together (--ensemble_dirs).
#                  auto: 2 members start, and at their first log line from update 200 on each
#                  member's rate says how many updates it will make in TRAIN_MINUTES; from
#                  ENSEMBLE_MIN_UPDATES (3400: from there 2 members led one model on val, the
#                  means of three seed pairs against three seeds, docs/training.md) both go on,
#                  else member 1 stops and member 0 resumes from its checkpoint on every core for
#                  the minutes left. OUT/members records the choice.
#                  With TRAIN_STEPS, or under 2 cores, auto is 1 (an update count is the same on
#                  every machine, so only an explicit ENSEMBLE changes it).
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
ENSEMBLE=${ENSEMBLE:-auto}
ENSEMBLE_MIN_UPDATES=${ENSEMBLE_MIN_UPDATES:-3400}
if ! [[ $ENSEMBLE =~ ^(auto|[1-9][0-9]*)$ ]]; then
  echo "error: ENSEMBLE=$ENSEMBLE: give a number of models (1, 2, ...) or auto" >&2
  exit 2
fi
if ! [[ $ENSEMBLE_MIN_UPDATES =~ ^[0-9]+$ ]]; then
  echo "error: ENSEMBLE_MIN_UPDATES=$ENSEMBLE_MIN_UPDATES: give a number of updates, e.g. 3400" >&2
  exit 2
fi
if [ "$ENSEMBLE" = auto ] && { [ -n "$STEPS" ] || [ "$(nproc)" -lt 2 ]; }; then
  ENSEMBLE=1
fi
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
# itself for one model); where ENSEMBLE=auto has chosen, the ones OUT/members lists.
multi30k_members() {
  if [ "$ENSEMBLE" = auto ] && [ -f "$1/members" ]; then
    cat "$1/members"
    return
  fi
  if [ "$ENSEMBLE" = 1 ]; then
    echo "$1"
    return
  fi
  local i
  for ((i = 0; i < ${ENSEMBLE/auto/2}; i++)); do echo "$1/member_$i"; done
}

# multi30k_members_pinned: whether multi30k_train_members pins each ENSEMBLE member to cores of
# its own (taskset is there and the machine has a core per member).
multi30k_members_pinned() {
  command -v taskset > /dev/null && [ "$(nproc)" -ge "${ENSEMBLE/auto/2}" ]
}

# multi30k_start_members OUT [more trainer flags]: starts multi30k_train of every member
# multi30k_members names in the background, member i's log beside its directory (OUT/member_i.log),
# each pinned to its own nproc/ENSEMBLE cores (member i to cores i*k ... i*k+k-1) where
# multi30k_members_pinned; their subshells' process ids in MEMBER_PIDS, their directories in
# MEMBER_DIRS. Until multi30k_wait_members returns, Ctrl-C or SIGTERM stops them too (a background
# job of a script ignores Ctrl-C, and would train on).
multi30k_start_members() {
  local out=$1
  shift
  mkdir -p "$out"
  local i pin=0 per
  mapfile -t MEMBER_DIRS < <(multi30k_members "$out")
  multi30k_members_pinned && pin=1
  per=$(( $(nproc) / ${#MEMBER_DIRS[@]} ))
  MEMBER_PIDS=()
  for i in "${!MEMBER_DIRS[@]}"; do
    (
      [ "$pin" = 1 ] && taskset -cp "$(( i * per ))-$(( i * per + per - 1 ))" "$BASHPID" > /dev/null
      [ "$i" -gt 0 ] && HPARAMS="$HPARAMS,seed=$i"
      multi30k_train "${MEMBER_DIRS[$i]}" "$@"
    ) > "${MEMBER_DIRS[$i]}.log" 2>&1 &
    MEMBER_PIDS+=($!)
  done
  trap 'echo "stopping the member trainings" >&2; multi30k_stop_members; exit 130' INT
  trap 'echo "stopping the member trainings" >&2; multi30k_stop_members; exit 143' TERM
  echo "training ${#MEMBER_DIRS[@]} models at once$([ "$pin" = 1 ] &&
    echo ", $per core$([ "$per" -gt 1 ] && echo s) each"): logs in ${MEMBER_DIRS[*]/%/.log}"
}

# multi30k_wait_members: waits for the members multi30k_start_members started; fails, naming the
# log, if any failed.
multi30k_wait_members() {
  local failed=0 i
  for i in "${!MEMBER_PIDS[@]}"; do
    wait "${MEMBER_PIDS[$i]}" || { echo "member $i failed: see ${MEMBER_DIRS[$i]}.log" >&2; failed=1; }
  done
  trap - INT TERM
  for i in "${!MEMBER_DIRS[@]}"; do grep -E "^(done|time budget)" "${MEMBER_DIRS[$i]}.log" | tail -1 || true; done
  return $failed
}

# multi30k_stop_members [I ...]: stops the trainings of members I (every one by default) that
# multi30k_start_members started, each trainer before its subshell, and waits until they are gone.
# A trainer is its subshell's child, not this shell's, so `wait` cannot wait for it, and a process
# sent SIGTERM ends only once it runs again: until then it may still write into its directory,
# which the caller may remove or resume a training in. A trainer still there after 60 s is killed.
multi30k_stop_members() {
  local i which=("$@") trainers=() children pid deadline
  [ $# -gt 0 ] || which=("${!MEMBER_PIDS[@]}")
  for i in "${which[@]}"; do
    children=($(pgrep -P "${MEMBER_PIDS[$i]}" 2> /dev/null || true))
    kill -TERM "${children[@]}" "${MEMBER_PIDS[$i]}" 2> /dev/null || true
    wait "${MEMBER_PIDS[$i]}" 2> /dev/null || true
    trainers+=("${children[@]}")
  done
  deadline=$(( SECONDS + 60 ))
  for pid in "${trainers[@]}"; do
    while multi30k_running "$pid" && (( SECONDS < deadline + 5 )); do
      if (( SECONDS >= deadline )); then kill -KILL "$pid" 2> /dev/null || true; fi
      sleep 0.1
    done
  done
}

# multi30k_running PID: whether process PID is there and not a zombie (an ended process whose
# parent has not reaped it yet, as a container without an init process may leave it).
multi30k_running() {
  local state
  state=$(ps -o stat= -p "$1" 2> /dev/null) && [[ $state != Z* ]]
}

# multi30k_progress LOG: "STEP RATE" of each progress line of a trainer's LOG (the trainer's
# updates/s covers the updates since the line before); nothing while LOG does not exist.
multi30k_progress() {
  [ -f "$1" ] || return 0
  sed -n 's|^step \([0-9]*\): .* updates/s \([0-9.e+-]*\)$|\1 \2|p' "$1"
}

# multi30k_member_rate LOG: "STEP RATE" of the first progress line of LOG from update 200 on
# (tracing and compiling left out), or nothing while there is none. (awk reads to the end: an
# early exit would fail the pipe under pipefail.)
multi30k_member_rate() {
  multi30k_progress "$1" | awk '$1 >= 200 && !found {print; found = 1}'
}

# multi30k_keep_members OUT: ENSEMBLE=auto keeps every member: OUT/members lists them, and their
# trainings are waited for as multi30k_wait_members does.
multi30k_keep_members() {
  printf '%s\n' "${MEMBER_DIRS[@]}" > "$1/members"
  multi30k_wait_members
}

# multi30k_choose_members OUT START: ENSEMBLE=auto's choice while its 2 members train (started at
# START, seconds since the epoch): at each member's first progress line from update 200 on, the
# updates it will have made when TRAIN_MINUTES are spent, at that line's rate. If the fewer is
# ENSEMBLE_MIN_UPDATES or more, both go on; else both stop once member 0 has saved a checkpoint at
# or after that line, member 1's directory goes, and member 0 resumes on every core for the
# minutes left (its log goes on in OUT/member_0.log and to the output). Writes OUT/members; fails
# as multi30k_wait_members does.
multi30k_choose_members() {
  local out=$1 start=$2 i alive line steps=() rates=() seconds=() predicted=() fewest
  while [ -z "${steps[0]:-}" ] || [ -z "${steps[1]:-}" ]; do
    for i in 0 1; do
      [ -n "${steps[$i]:-}" ] && continue
      alive=1
      kill -0 "${MEMBER_PIDS[$i]}" 2> /dev/null || alive=0  # before reading: then its log is whole
      line=$(multi30k_member_rate "${MEMBER_DIRS[$i]}.log")
      if [ -n "$line" ]; then
        steps[$i]=${line% *} rates[$i]=${line#* } seconds[$i]=$(( $(date +%s) - start ))
      elif [ "$alive" = 0 ]; then
        echo "ENSEMBLE=auto: member $i ended before its rate from update 200 on was known; keeping both"
        multi30k_keep_members "$out"
        return
      fi
    done
    [ -n "${steps[0]:-}" ] && [ -n "${steps[1]:-}" ] || sleep 2
  done
  for i in 0 1; do
    predicted[$i]=$(awk -v s="${steps[$i]}" -v r="${rates[$i]}" -v t="${seconds[$i]}" -v m="$MINUTES" \
      'BEGIN {n = s + r * (m * 60 - t); printf "%d", (n > s ? n : s)}')
  done
  fewest=$(( predicted[0] < predicted[1] ? predicted[0] : predicted[1] ))
  echo "ENSEMBLE=auto: members at ${rates[0]} and ${rates[1]} updates/s (updates $(( steps[0] - 100 ))-${steps[0]} and $(( steps[1] - 100 ))-${steps[1]}) make about ${predicted[0]} and ${predicted[1]} updates in $MINUTES min"
  if (( fewest >= ENSEMBLE_MIN_UPDATES )); then
    echo "ENSEMBLE=auto: $fewest >= ENSEMBLE_MIN_UPDATES ($ENSEMBLE_MIN_UPDATES): training both, decoded as one"
    multi30k_keep_members "$out"
    return
  fi
  echo "ENSEMBLE=auto: $fewest < ENSEMBLE_MIN_UPDATES ($ENSEMBLE_MIN_UPDATES): one model instead; member 0 goes on alone on every core from its checkpoint"
  until sed -n 's/^saved .*ckpt-\([0-9]*\)$/\1/p' "${MEMBER_DIRS[0]}.log" | awk -v s="${steps[0]}" '$1 >= s {f = 1} END {exit !f}'; do
    kill -0 "${MEMBER_PIDS[0]}" 2> /dev/null || break
    sleep 1
  done
  multi30k_stop_members 1 0
  trap - INT TERM
  rm -rf "${MEMBER_DIRS[1]}"
  echo "${MEMBER_DIRS[0]}" > "$out/members"
  local left
  left=$(awk -v m="$MINUTES" -v t=$(( $(date +%s) - start )) 'BEGIN {printf "%.2f", (m * 60 - t) / 60}')
  echo "resuming ${MEMBER_DIRS[0]} for the $left min left" | tee -a "${MEMBER_DIRS[0]}.log"
  MINUTES=$left multi30k_train "${MEMBER_DIRS[0]}" "${@:3}" 2>&1 | tee -a "${MEMBER_DIRS[0]}.log"
}

# multi30k_train_members OUT [more trainer flags]: multi30k_train of every ENSEMBLE member at once
# (one model: OUT itself, in the foreground) into the directories multi30k_members names, as
# multi30k_start_members starts them; ENSEMBLE=auto chooses (multi30k_choose_members), or resumes
# what an earlier run into OUT chose. Fails if any member failed.
multi30k_train_members() {
  local out=$1 start
  start=$(date +%s)
  shift
  if [ "$ENSEMBLE" = auto ] && [ -f "$out/members" ] && [ "$(wc -l < "$out/members")" = 1 ]; then
    multi30k_train "$(cat "$out/members")" "$@"
    return
  fi
  if [ "$ENSEMBLE" = 1 ]; then
    multi30k_train "$out" "$@"
    return
  fi
  multi30k_start_members "$out" "$@"
  if [ "$ENSEMBLE" = auto ] && [ ! -f "$out/members" ]; then
    multi30k_choose_members "$out" "$start" "$@"
  else
    multi30k_wait_members
  fi
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
