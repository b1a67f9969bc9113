#!/usr/bin/env bash
# The learning curve of one recipe run: for each update count N given, the average of the AVERAGE
# checkpoints SAVE_STEPS apart ending at N (what the recipe stopped at N would average), decoded
# with DECODE and scored with sacreBLEU on val and test_2016_flickr. The run must have kept those
# checkpoints (KEEP_CHECKPOINTS=100 for a 55-minute run). The training is deterministic and its
# learning-rate schedule does not depend on the budget, so checkpoint N of a long run is the last
# checkpoint of a run of N updates (docs/training.md). A run of several models at once (the
# recipe's ENSEMBLE: the members OUT/members lists where auto chose, else OUT/member_0, 1, ...)
# is read as the recipe decodes it: each member's average ending at N, decoded together as one.
#
#   KEEP_CHECKPOINTS=100 ENSEMBLE=1 OUT=runs/multi30k_55min bash scripts/multi30k_recipe.sh
#   OUT=runs/multi30k_55min bash scripts/multi30k_curve.sh 4000 6000 8000 10000
#
# The averages go to OUT/curve/avg_N (a run of members: OUT/curve/avg_N/member_i), with the
# translations val.hyp.de and test_2016_flickr.hyp.de in OUT/curve/avg_N. The recipe's variables
# apply (scripts/multi30k_common.sh): SAVE_STEPS, AVERAGE, DECODE, RAW_DATA_DIR.
set -euo pipefail
. "$(dirname "$0")/multi30k_common.sh"
OUT=${OUT:-runs/multi30k}
fail() { echo "error: $*" >&2; exit 2; }
models=()
if [ -f "$OUT/members" ]; then
  mapfile -t models < "$OUT/members"
else
  for ((i = 0; ; i++)); do
    [ -d "$OUT/member_$i" ] || break
    models+=("$OUT/member_$i")
  done
  [ ${#models[@]} -gt 0 ] || models=("$OUT")
fi
[ $# -gt 0 ] || fail "give the update counts to read the curve at, e.g. 4000 6000 8000"
for N in "$@"; do  # every argument checked before anything is averaged
  [[ $N =~ ^[1-9][0-9]*$ ]] || fail "'$N' is not a number of updates"
  (( N - (AVERAGE - 1) * SAVE_STEPS > 0 )) ||
    fail "$N updates hold no $AVERAGE checkpoints $SAVE_STEPS apart"
  for model in "${models[@]}"; do
    for ((k = AVERAGE - 1; k >= 0; k--)); do
      [ -f "$model/ckpt-$((N - k * SAVE_STEPS)).index" ] ||
        fail "$model has no ckpt-$((N - k * SAVE_STEPS)) (train with KEEP_CHECKPOINTS high" \
          "enough to keep every checkpoint, and SAVE_STEPS as it was trained with)"
    done
  done
done
if [ ${#models[@]} -gt 1 ]; then
  echo "reading ${#models[@]} models as one ensemble: ${models[*]}"
fi
for N in "$@"; do
  list=$(for ((k = AVERAGE - 1; k >= 0; k--)); do echo "ckpt-$((N - k * SAVE_STEPS))"; done | paste -sd,)
  avg="$OUT/curve/avg_$N"
  averaged=()
  for model in "${models[@]}"; do
    if [ ${#models[@]} -gt 1 ]; then averaged+=("$avg/${model##*/}"); else averaged+=("$avg"); fi
    multi30k_average "$model" "${averaged[-1]}" "$list"
  done
  for split in val test_2016_flickr; do
    multi30k_decode "$(IFS=,; echo "${averaged[*]}")" "$RAW/$split.en" "$avg/$split.hyp.de"
    echo "== $N updates, $split: $(t2t-lite-bleu --translation="$avg/$split.hyp.de" \
      --reference="$RAW/$split.de" --lang=de | grep -m1 '^sacreBLEU')"
  done
done
