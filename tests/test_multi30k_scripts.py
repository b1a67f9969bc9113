"""The Multi30k recipe and its tuning script, with stand-ins for the t2t-lite commands: the recipe's
command lines are the tuned defaults and follow SAVE_STEPS, AVERAGE and
TRAIN_STEPS; the tuning script scores val only, averages the checkpoints the recipe would, trains
each hparams once, skips what its table holds, resumes or restarts an interrupted training and
records a diverged one. The real commands run in SMOKE=1 mode (docs/training.md)."""

import os
import pathlib
import re
import shutil
import signal
import statistics
import subprocess
import time

import pytest

from stand_ins import stand_in_venv

REPO = pathlib.Path(__file__).resolve().parent.parent
SCRIPTS = ("multi30k_common.sh", "multi30k_recipe.sh", "multi30k_tune.sh", "multi30k_curve.sh")

# Each stand-in logs "<command> <args>" to $CALLS. The trainer writes ckpt-N.index every
# --save_checkpoints_steps and at its last step: --train_steps, or $FAKE_LAST_STEP under
# --train_minutes, logging "saved OUT/ckpt-N" for each, and keeps the newest --keep_checkpoint_max
# of them; $FAKE_EXIT makes it stop early (at update 300, or $FAKE_EXIT_STEP) with that status,
# hparams with learning_rate_constant=9 make it diverge; with $FAKE_HOLD its first run into a
# folder then sleeps that many seconds instead of ending (a training still going when the recipe
# reads its log), and if sent SIGTERM meanwhile, ends a second later, logging "stopped OUT" to
# $CALLS (a trainer finishing a write: the recipe must wait for it); it records a training path
# in hparams.json. Every --log_every updates it logs a line with the "updates/s" of those
# updates, as t2t-lite-trainer does: 2.0 (batch_size=2048:
# 3.2; num_hidden_layers=2: 2.6; a second ensemble member, hparams ending in seed=1: 1.1),
# but 0.05 up to step 20 (tracing) and 0.1 at each 7th step (a batch shape compiled), which the
# rates mode must not count; with $FAKE_SPREAD the others each at their own rate, the rate over
# 1 + (step % 5) / 10, so that the median's two middle values differ.
TRAINER = r"""
echo "trainer $*" >> "$CALLS"
log=100
for a in "$@"; do case $a in
  --output_dir=*) out=${a#*=} ;; --train_steps=*) steps=${a#*=} ;; --train_minutes=*) minutes=1 ;;
  --save_checkpoints_steps=*) save=${a#*=} ;; --hparams=*) hparams=${a#*=} ;;
  --overwrite_output_dir) overwrite=1 ;; --log_every=*) log=${a#*=} ;;
  --keep_checkpoint_max=*) keep=${a#*=} ;;
esac; done
[ -n "${overwrite:-}" ] && rm -rf "$out"
mkdir -p "$out"
echo '{"training_path": {"summary": "float32, whole-step XLA", "reason": "AVX2 CPU"}}' > "$out/hparams.json"
last=$steps; [ -n "${minutes:-}" ] && last=${FAKE_LAST_STEP:-1498}
[ -n "${FAKE_EXIT:-}" ] && last=${FAKE_EXIT_STEP:-300}
case $hparams in *learning_rate_constant=9*) last=300 ;; esac
rate=2.0
case $hparams in *,seed=1) rate=1.1 ;; *batch_size=2048*) rate=3.2 ;; *num_hidden_layers=2*) rate=2.6 ;; esac
for ((s = log; s <= last; s += log)); do
  r=$rate
  [ -n "${FAKE_SPREAD:-}" ] && r=$(awk -v r=$rate -v s=$s 'BEGIN {printf "%.6g", r / (1 + s % 5 / 10)}')
  (( s <= 20 )) && r=0.05; (( s % 7 == 0 )) && r=0.1
  echo "step $s: loss 1.2345 lr 0.001 target tokens/s 1,234 updates/s $r"
done
for ((s = save; s <= last; s += save)); do touch "$out/ckpt-$s.index"; echo "saved $out/ckpt-$s"; done
touch "$out/ckpt-$last.index"
if [ -n "${keep:-}" ]; then
  ls "$out" | sed -n 's/^ckpt-\([0-9]*\)\.index$/\1/p' | sort -n | head -n -"$keep" |
    while read -r s; do rm "$out/ckpt-$s.index"; done
fi
[ -n "${FAKE_EXIT:-}" ] && exit "$FAKE_EXIT"
if [ -n "${FAKE_HOLD:-}" ] && [ ! -e "$out/.held" ]; then
  touch "$out/.held"
  trap 'kill "$held"; sleep 1; echo "stopped $out" >> "$CALLS"; exit 143' TERM
  sleep "$FAKE_HOLD" & held=$!
  wait "$held"
fi
case $hparams in *learning_rate_constant=9*)
  echo "error: training loss (or gradient) became NaN or infinite before step 301; stopped"; exit 1 ;;
esac
echo "done: step $last"
"""
# Averages --checkpoints (with --prefix), or the newest --num_last_checkpoints; logs which.
AVERAGE = r"""
for a in "$@"; do case $a in
  --output_dir=*) out=${a#*=} ;; --avg_dir=*) avg=${a#*=} ;; --checkpoints=*) list=${a#*=} ;;
  --num_last_checkpoints=*) n=${a#*=} ;;
esac; done
[ -z "${list:-}" ] && list=$(ls "$out" | sed -n 's/^\(ckpt-[0-9]*\)\.index$/\1/p' | sort -t- -k2 -n |
                             tail -n "$n" | paste -sd, -)
echo "average $* averaged=$list" >> "$CALLS"
mkdir -p "$avg" && echo "$list" > "$avg/checkpoint"
"""
# Each output line names the model and the decode settings (from and to the files given, else
# stdin and stdout); the BLEU stand-in scores a file by its checksum, so that different
# translations score differently.
DECODER = r"""
echo "decoder $*" >> "$CALLS"
src=/dev/stdin dst=/dev/stdout
for a in "$@"; do case $a in
  --output_dir=*) model=${a#*=} ;; --decode_from_file=*) src=${a#*=} ;;
  --decode_to_file=*) dst=${a#*=} ;; --decode_hparams=*) hp=${a#*=} ;;
esac; done
while read -r line; do echo "$model $hp $line"; done < "$src" > "$dst"
"""
BLEU = r"""
echo "bleu $*" >> "$CALLS"
for a in "$@"; do case $a in --translation=*) hyp=${a#*=} ;; esac; done
sum=$(cksum < "$hyp" | cut -d' ' -f1)
printf 'sacreBLEU = %d.%02d  (nrefs:1|case:mixed)\ntokenized BLEU = 1.00  (Moses)\n' \
  $((sum / 100 % 100)) $((sum % 100))
"""
HEADER = ["setting", "hparams", "checkpoints", "decode", "budget", "steps", "train_minutes",
          "val_bleu_last", "val_bleu_average", "cpu", "date", "commit"]


@pytest.fixture
def copy(tmp_path):
  """The three scripts in a folder of their own, with stand-ins for setup.sh and the commands, and
  a Multi30k folder of three lines a split."""
  (tmp_path / "scripts").mkdir()
  for name in SCRIPTS:
    shutil.copy(REPO / "scripts" / name, tmp_path / "scripts" / name)
  (tmp_path / "scripts" / "setup.sh").write_text("exit 0\n")
  stand_in_venv(tmp_path, {f"t2t-lite-{command}": "#!/usr/bin/env bash\n" + text for command, text in
                           (("trainer", TRAINER), ("avg-checkpoints", AVERAGE), ("decoder", DECODER),
                            ("bleu", BLEU))})
  raw = tmp_path / "raw"
  raw.mkdir()
  for split in ("train", "val", "test_2016_flickr"):
    for lang in ("en", "de"):
      (raw / f"{split}.{lang}").write_text("".join(f"{split} {lang} {i}\n" for i in range(3)))
  return tmp_path


SETTINGS_VARIABLES = ("TRAIN_MINUTES", "TRAIN_STEPS", "SAVE_STEPS", "AVERAGE", "HPARAMS", "DECODE", "OUT",
                      "ENSEMBLE", "ENSEMBLE_MIN_UPDATES",
                      "DATA_DIR", "KEEP_CHECKPOINTS", "SMOKE", "SETTINGS", "ONLY", "MAX_TRAININGS",
                      "ROOT", "TABLE", "TUNE_SAVE_STEPS", "VAL_LINES", "RATES", "RATE_SKIP", "RATE_UPDATES",
                      "MEMBER_RATES")


def run(folder, script, *args, **env):
  """Runs scripts/SCRIPT in `folder` with `env`; (the result, the commands it called)."""
  environment = {k: v for k, v in os.environ.items() if k not in SETTINGS_VARIABLES}
  environment.update(CALLS=str(folder / "calls.log"), RAW_DATA_DIR=str(folder / "raw"), **env)
  result = subprocess.run(["bash", str(folder / "scripts" / script), *args], capture_output=True,
                          text=True, timeout=60, env=environment)
  calls = (folder / "calls.log").read_text().splitlines() if (folder / "calls.log").exists() else []
  (folder / "calls.log").unlink(missing_ok=True)
  return result, calls


def table(folder):
  rows = [line.split("\t") for line in (folder / "scripts" / "multi30k_tuning.tsv").read_text().splitlines()]
  assert rows[0] == HEADER
  return [dict(zip(HEADER, row)) for row in rows[1:]]


def of(calls, command):
  return [c.split(" ", 1)[1] for c in calls if c.startswith(command + " ")]


def test_recipe_defaults_are_the_tuned_set_and_decoding(copy):
  """One model (ENSEMBLE=1): the tuned set for 55 minutes into OUT itself, its last 5 checkpoints
  averaged, test decoded with beam 4 and alpha 1.2 and scored."""
  result, calls = run(copy, "multi30k_recipe.sh", ENSEMBLE="1")
  assert result.returncode == 0, result.stderr
  raw = copy / "raw"
  assert of(calls, "trainer") == [
      f"--problem=translate_ende_multi30k --raw_data_dir={raw} --data_dir=t2t_data --hparams=multi30k_tiny "
      "--output_dir=runs/multi30k --train_steps=100000 --train_minutes=55 --save_checkpoints_steps=200 "
      "--keep_checkpoint_max=10 --eval_every=600 --eval_steps=20 --log_every=100 "
      "--decode_hparams=extra_length=50"]
  assert of(calls, "average") == [
      "--output_dir=runs/multi30k --num_last_checkpoints=5 --avg_dir=runs/multi30k/averaged "
      "averaged=ckpt-800,ckpt-1000,ckpt-1200,ckpt-1400,ckpt-1498"]
  assert of(calls, "decoder") == [
      f"--output_dir=runs/multi30k/averaged --decode_from_file={raw}/test_2016_flickr.en "
      "--decode_to_file=runs/multi30k/test_2016_flickr.hyp.de "
      "--decode_hparams=beam_size=4,alpha=1.2,extra_length=50,batch_size=64"]
  assert of(calls, "bleu") == [f"--translation=runs/multi30k/test_2016_flickr.hyp.de "
                               f"--reference={raw}/test_2016_flickr.de --lang=de"]
  # The path the training took, as the trainer recorded it in hparams.json.
  assert "\ntraining path: float32, whole-step XLA (AVX2 CPU)\n" in result.stdout


TWO_CORES = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="ENSEMBLE=auto is 1 under 2 cores")


def member_trainer_call(copy, i, budget, hparams="multi30k_tiny"):
  return (f"--problem=translate_ende_multi30k --raw_data_dir={copy / 'raw'} --data_dir=t2t_data "
          f"--hparams={hparams}{',seed=1' if i else ''} --output_dir=runs/multi30k/member_{i} {budget} "
          "--save_checkpoints_steps=200 --keep_checkpoint_max=10 --eval_every=600 --eval_steps=20 "
          "--log_every=100 --decode_hparams=extra_length=50")


@TWO_CORES
def test_recipe_by_default_keeps_two_members_that_make_enough_updates(copy):
  """ENSEMBLE=auto (the default): two members start; at update 200 the slower one's rate (the
  stand-in's seed=1 member: 1.1 updates/s, 200 + 1.1 x 3,300 s = about 3,829 updates in 55
  minutes) clears ENSEMBLE_MIN_UPDATES (3,400), so both train on and decode as one; OUT/members
  records them, and a second run into OUT resumes both."""
  result, calls = run(copy, "multi30k_recipe.sh")
  assert result.returncode == 0, result.stderr
  budget = "--train_steps=100000 --train_minutes=55"
  assert sorted(of(calls, "trainer")) == [member_trainer_call(copy, i, budget) for i in range(2)]
  predicted = re.search(r"make about (\d+) and (\d+) updates in 55 min", result.stdout)
  assert predicted, result.stdout
  assert 3_800 < int(predicted.group(2)) <= 200 + 1.1 * 3300 < int(predicted.group(1)), predicted.group(0)
  assert "ENSEMBLE=auto: members at 2.0 and 1.1 updates/s (updates 100-200 and 100-200)" in result.stdout
  assert ">= ENSEMBLE_MIN_UPDATES (3400): training both, decoded as one" in result.stdout
  runs = copy / "runs" / "multi30k"
  assert (runs / "members").read_text() == "runs/multi30k/member_0\nruns/multi30k/member_1\n"
  assert of(calls, "decoder")[0].startswith(
      "--output_dir=runs/multi30k/member_0/averaged --ensemble_dirs=runs/multi30k/member_1/averaged ")
  result, calls = run(copy, "multi30k_recipe.sh")
  assert result.returncode == 0, result.stderr
  assert sorted(of(calls, "trainer")) == [member_trainer_call(copy, i, budget) for i in range(2)]
  assert "ENSEMBLE=auto: members at" not in result.stdout


@TWO_CORES
def test_recipe_by_default_goes_on_with_one_model_when_members_would_make_too_few(copy):
  """Under ENSEMBLE_MIN_UPDATES, member 1 stops and goes, and member 0 resumes from its checkpoint
  of update 200 on every core for the minutes left (unpinned); one model is averaged and decoded,
  and OUT/members names it, so that a second run resumes it alone."""
  result, calls = run(copy, "multi30k_recipe.sh", ENSEMBLE_MIN_UPDATES="5000", FAKE_HOLD="31.7")
  assert result.returncode == 0, result.stderr
  first, second, resumed = of(calls, "trainer")
  assert sorted([first, second]) == [member_trainer_call(copy, i, "--train_steps=100000 --train_minutes=55")
                                     for i in range(2)]
  left = re.search(r"--train_minutes=(\d+\.\d\d) ", resumed)
  assert left and 54 < float(left.group(1)) <= 55, resumed
  assert resumed == member_trainer_call(copy, 0, f"--train_steps=100000 --train_minutes={left.group(1)}")
  assert "< ENSEMBLE_MIN_UPDATES (5000): one model instead" in result.stdout
  runs = copy / "runs" / "multi30k"
  assert not (runs / "member_1").exists()
  assert (runs / "members").read_text() == "runs/multi30k/member_0\n"
  log = (runs / "member_0.log").read_text()
  assert f"resuming runs/multi30k/member_0 for the {left.group(1)} min left" in log
  assert "done: step 1498" in log
  average, = of(calls, "average")
  assert average.startswith("--output_dir=runs/multi30k/member_0 --num_last_checkpoints=5 ")
  decode, = of(calls, "decoder")
  assert decode.startswith("--output_dir=runs/multi30k/member_0/averaged --decode_from_file=")
  # Both held stand-ins were stopped, not waited for (they would sleep 31.7 s), and were gone
  # before member 0 resumed in its directory and member 1's was removed.
  assert not subprocess.run(["pgrep", "-f", "sleep 31.7"], capture_output=True).stdout
  trainings = [c.split(" ", 1)[0] for c in calls if c.split(" ", 1)[0] in ("trainer", "stopped")]
  assert trainings == ["trainer", "trainer", "stopped", "stopped", "trainer"], calls
  assert sorted(of(calls, "stopped")) == [f"runs/multi30k/member_{i}" for i in range(2)]
  result, calls = run(copy, "multi30k_recipe.sh", ENSEMBLE_MIN_UPDATES="5000")
  assert result.returncode == 0, result.stderr
  assert of(calls, "trainer") == [member_trainer_call(copy, 0, "--train_steps=100000 --train_minutes=55")]


def test_recipe_by_default_keeps_both_members_when_one_ends_before_its_rate_is_known(copy):
  """A member that ends before update 200 gives ENSEMBLE=auto no rate to decide on: it keeps both
  and reports the failure as ENSEMBLE=2 does, naming the log, before any averaging or decoding."""
  result, calls = run(copy, "multi30k_recipe.sh", FAKE_EXIT="3", FAKE_EXIT_STEP="100")
  assert result.returncode != 0
  assert "ended before its rate from update 200 on was known; keeping both" in result.stdout
  assert re.search(r"member \d failed: see runs/multi30k/member_\d\.log", result.stderr), result.stderr
  assert len(of(calls, "trainer")) == 2 and of(calls, "average") == of(calls, "decoder") == []
  assert (copy / "runs" / "multi30k" / "members").read_text() == (
      "runs/multi30k/member_0\nruns/multi30k/member_1\n")


def with_cores(copy, cores):
  """PATH with stand-ins for `nproc` (it says CORES) and `taskset` (it logs its call and pins
  nothing) first."""
  stubs = copy / "cores"
  stubs.mkdir()
  (stubs / "nproc").write_text(f"#!/usr/bin/env bash\necho {cores}\n")
  (stubs / "taskset").write_text('#!/usr/bin/env bash\necho "taskset $*" >> "$CALLS"\n')
  for name in ("nproc", "taskset"):
    os.chmod(stubs / name, 0o755)
  return f"{stubs}:{os.environ['PATH']}"


@pytest.mark.parametrize("cores, ensemble, pins, said", [
    (4, "2", ["0-1", "2-3"], "training 2 models at once, 2 cores each: logs in "),
    (6, "3", ["0-1", "2-3", "4-5"], "training 3 models at once, 2 cores each: logs in "),
    (3, "2", ["0-0", "1-1"], "training 2 models at once, 1 core each: logs in "),
    (1, "2", [], "training 2 models at once: logs in "),
])
def test_members_are_pinned_to_cores_of_their_own_where_there_are_enough(copy, cores, ensemble, pins,
                                                                       said):
  """Member i gets cores i*k ... i*k+k-1, k = nproc / ENSEMBLE (a core left over stays idle); with
  fewer cores than members none is pinned."""
  result, calls = run(copy, "multi30k_recipe.sh", ENSEMBLE=ensemble, TRAIN_STEPS="400",
                      PATH=with_cores(copy, cores))
  assert result.returncode == 0, result.stderr
  assert said in result.stdout
  assert sorted(c.split()[:2] for c in of(calls, "taskset")) == [["-cp", p] for p in pins], calls
  assert len(of(calls, "trainer")) == int(ensemble)


def test_recipe_by_default_trains_one_model_under_two_cores(copy):
  result, calls = run(copy, "multi30k_recipe.sh", PATH=with_cores(copy, 1))
  assert result.returncode == 0, result.stderr
  trainer, = of(calls, "trainer")
  assert " --output_dir=runs/multi30k --train_steps=100000 --train_minutes=55 " in trainer
  assert of(calls, "taskset") == [] and "ENSEMBLE=auto" not in result.stdout


@pytest.mark.parametrize("signal_number, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_stopping_the_recipe_stops_its_members_trainings(copy, signal_number, status):
  """Ctrl-C (or SIGTERM) on the recipe while its members train stops their trainings too: a
  background job of a script ignores Ctrl-C and would train on, unseen."""
  hold = f"32.{signal_number}"
  environment = {k: v for k, v in os.environ.items() if k not in SETTINGS_VARIABLES}
  environment.update(CALLS=str(copy / "calls.log"), RAW_DATA_DIR=str(copy / "raw"), ENSEMBLE="2",
                     FAKE_HOLD=hold)
  # As from a terminal: a shell that starts with Ctrl-C ignored cannot trap it, and the suite's own
  # process may have it ignored (started as a background job: CI's run failed here so), so the
  # recipe starts with Ctrl-C's default.
  recipe = subprocess.Popen(["bash", str(copy / "scripts" / "multi30k_recipe.sh")], env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  held = lambda: subprocess.run(["pgrep", "-f", f"sleep {hold}"], capture_output=True,  # noqa: E731
                                text=True).stdout.split()
  deadline = time.time() + 30
  while len(held()) < 2 and time.time() < deadline:
    time.sleep(0.2)
  assert len(held()) == 2, "the stand-in members did not start"
  recipe.send_signal(signal_number)
  out, err = recipe.communicate(timeout=30)
  assert recipe.returncode == status, (out, err)
  assert "stopping the member trainings" in err
  assert held() == []
  # The recipe ended after its members' trainers, not before (each takes a second to end).
  stopped = [c for c in (copy / "calls.log").read_text().splitlines() if c.startswith("stopped ")]
  assert sorted(stopped) == [f"stopped runs/multi30k/member_{i}" for i in range(2)], stopped
  assert "decoder" not in (copy / "calls.log").read_text()


@pytest.mark.parametrize("env, message", [
    ({"ENSEMBLE": "two"}, "ENSEMBLE=two: give a number of models (1, 2, ...) or auto"),
    ({"ENSEMBLE": "0"}, "ENSEMBLE=0: give a number of models"),
    ({"ENSEMBLE_MIN_UPDATES": "lots"}, "ENSEMBLE_MIN_UPDATES=lots: give a number of updates"),
])
def test_recipe_refuses_an_ensemble_it_cannot_train(copy, env, message):
  result, calls = run(copy, "multi30k_recipe.sh", **env)
  assert result.returncode == 2 and calls == []
  assert message in result.stderr


def test_by_steps_the_recipe_trains_one_model_unless_told(copy):
  """An update count is the same on every machine: with TRAIN_STEPS, auto is one model in OUT."""
  result, calls = run(copy, "multi30k_recipe.sh", TRAIN_STEPS="400")
  assert result.returncode == 0, result.stderr
  trainer, = of(calls, "trainer")
  assert " --output_dir=runs/multi30k --train_steps=400 " in trainer


def test_recipe_ensemble_trains_its_members_at_once_and_decodes_them_as_one(copy):
  """ENSEMBLE=2: member i trains into OUT/member_i (member 1 with seed=1 after HPARAMS), its log
  in OUT/member_i.log; each member's last AVERAGE checkpoints are averaged, and test is decoded
  once, by the first average with the other's as --ensemble_dirs. A member that fails fails the
  recipe before any decoding, naming its log."""
  result, calls = run(copy, "multi30k_recipe.sh", ENSEMBLE="2", TRAIN_STEPS="600")
  assert result.returncode == 0, result.stderr
  runs = copy / "runs" / "multi30k"
  assert sorted(of(calls, "trainer")) == [
      f"--problem=translate_ende_multi30k --raw_data_dir={copy / 'raw'} --data_dir=t2t_data "
      f"--hparams={hparams} --output_dir=runs/multi30k/member_{i} --train_steps=600 "
      "--save_checkpoints_steps=200 --keep_checkpoint_max=10 --eval_every=600 --eval_steps=20 "
      "--log_every=100 --decode_hparams=extra_length=50"
      for i, hparams in enumerate(("multi30k_tiny", "multi30k_tiny,seed=1"))]
  for i in range(2):
    assert "done: step 600" in (runs / f"member_{i}.log").read_text()
  assert sorted(of(calls, "average")) == [
      f"--output_dir=runs/multi30k/member_{i} --num_last_checkpoints=5 "
      f"--avg_dir=runs/multi30k/member_{i}/averaged averaged=ckpt-200,ckpt-400,ckpt-600"
      for i in range(2)]
  assert of(calls, "decoder") == [
      "--output_dir=runs/multi30k/member_0/averaged "
      "--ensemble_dirs=runs/multi30k/member_1/averaged "
      f"--decode_from_file={copy / 'raw'}/test_2016_flickr.en "
      "--decode_to_file=runs/multi30k/test_2016_flickr.hyp.de "
      "--decode_hparams=beam_size=4,alpha=1.2,extra_length=50,batch_size=64"]
  assert "training 2 models at once" in result.stdout
  assert "\ntraining path: float32, whole-step XLA (AVX2 CPU)\n" in result.stdout

  result, calls = run(copy, "multi30k_recipe.sh", ENSEMBLE="2", TRAIN_STEPS="600", FAKE_EXIT="3",
                      OUT="runs/failing")
  assert result.returncode != 0
  assert "member 0 failed: see runs/failing/member_0.log" in result.stderr
  assert of(calls, "average") == [] and of(calls, "decoder") == []


# How far apart two val scores of the same training can land: the 55-minute run's average of
# 200x5 at 4,200 updates scored 40.90 where the tuning run of the same set averaged 41.38 at
# 4,241 (docs/training.md). A setting must lead the defaults by more than this to replace them.
VAL_NOISE = 0.5


def test_the_recipe_defaults_are_the_val_leader_of_the_tuning_table():
  """The recipe's HPARAMS, SAVE_STEPS x AVERAGE and DECODE defaults are a setting of
  scripts/multi30k_tuning.tsv (of the budget the settings were tuned at) whose averaged val BLEU
  is within VAL_NOISE of the best row's; the registered set is that setting's hparams value for
  value. A row more than VAL_NOISE above the defaults fails this until it is adopted."""
  from t2t_lite.hparams import get_hparams  # pylint: disable=import-outside-toplevel

  lines = (REPO / "scripts" / "multi30k_tuning.tsv").read_text().splitlines()
  rows = [dict(zip(HEADER, line.split("\t"))) for line in lines[1:]]
  tuned = [r for r in rows if r["budget"] == "1750 steps matched by rate"]
  leader = max(tuned, key=lambda r: float(r["val_bleu_average"]))
  common = (REPO / "scripts" / "multi30k_common.sh").read_text()
  default = lambda name: re.search(rf"^{name}=\$\{{{name}:-(.*)\}}$", common, re.M).group(1)
  recipe = get_hparams(default("HPARAMS"))
  # A row of another problem (a `problem=` item, which multi30k_common.sh takes out of the
  # hparams: another vocabulary) is not the recipe's defaults, whatever its hparams.
  own_problem = lambda r: not any(item.startswith("problem=") for item in r["hparams"].split(","))  # noqa: E731
  defaults = [r for r in tuned if r["checkpoints"] == f"{default('SAVE_STEPS')}x{default('AVERAGE')}"
              and r["decode"] == default("DECODE") and own_problem(r)
              and get_hparams(r["hparams"]) == recipe]
  assert defaults, "no row of the table is the recipe's defaults"
  best_default = max(float(r["val_bleu_average"]) for r in defaults)
  assert float(leader["val_bleu_average"]) - best_default <= VAL_NOISE, leader


def test_quickstart_runs_the_recipe_with_its_short_budget_settings_then_translates(copy):
  """scripts/quickstart.sh: the recipe for 8 minutes with batches of 2,048 tokens, warmup 400 at
  the set's peak and the average of 2 checkpoints (chosen on val for that budget,
  docs/getting-started.md), into
  runs/quickstart; then its three sentences through the averaged model; each setting still
  overridable."""
  shutil.copy(REPO / "scripts" / "quickstart.sh", copy / "scripts" / "quickstart.sh")
  result, calls = run(copy, "quickstart.sh")
  assert result.returncode == 0, result.stderr
  trainer, = of(calls, "trainer")
  assert ("--hparams=multi30k_tiny,batch_size=2048,learning_rate_warmup_steps=400,"
          "learning_rate_constant=1.1314 "
          "--output_dir=runs/quickstart --train_steps=100000 --train_minutes=8 "
          "--save_checkpoints_steps=200 --keep_checkpoint_max=10 ") in trainer
  average, = of(calls, "average")
  assert average.startswith("--output_dir=runs/quickstart --num_last_checkpoints=2 "
                            "--avg_dir=runs/quickstart/averaged ")
  test_decode, sentences = of(calls, "decoder")
  assert "--decode_to_file=runs/quickstart/test_2016_flickr.hyp.de" in test_decode
  assert sentences == ("--output_dir=runs/quickstart/averaged "
                       "--decode_hparams=beam_size=4,alpha=1.2,extra_length=50")
  assert result.stdout.endswith(
      "runs/quickstart/averaged beam_size=4,alpha=1.2,extra_length=50 "
      "A woman is reading a book in the park .\n")
  assert result.stdout.count("runs/quickstart/averaged beam_size=4,alpha=1.2,extra_length=50 ") == 3
  # A second run into the same folder would resume the first (or be refused for other settings):
  # it stops before any command, saying how to keep the first run.
  result, calls = run(copy, "quickstart.sh")
  assert result.returncode == 2 and calls == []
  assert "error: runs/quickstart holds an earlier run" in result.stderr and "OUT=" in result.stderr
  result, calls = run(copy, "quickstart.sh", TRAIN_MINUTES="3", AVERAGE="3", HPARAMS="multi30k_tiny",
                      OUT="runs/other")
  assert result.returncode == 0, result.stderr
  trainer, = of(calls, "trainer")
  assert " --hparams=multi30k_tiny --output_dir=runs/other --train_steps=100000 --train_minutes=3 " in trainer
  assert " --num_last_checkpoints=3 --avg_dir=runs/other/averaged " in of(calls, "average")[0]
  assert of(calls, "decoder")[1].startswith("--output_dir=runs/other/averaged ")


def test_quickstart_warms_up_to_the_recipe_sets_peak_learning_rate():
  """The quickstart's shorter warmup reaches the same peak learning rate as the recipe's set (the
  schedule the trainer builds, at the end of each warmup), and stays below it before; besides
  that and half the batch, it trains the recipe's set."""
  from t2t_lite.hparams import get_hparams  # pylint: disable=import-outside-toplevel
  from t2t_lite.training.schedule import TransformerSchedule  # pylint: disable=import-outside-toplevel

  text = (REPO / "scripts" / "quickstart.sh").read_text()
  quick = get_hparams(re.search(r"^export HPARAMS=\$\{HPARAMS:-(.*)\}$", text, re.M).group(1))
  recipe = get_hparams("multi30k_tiny")
  assert quick.learning_rate_warmup_steps == 400 < recipe.learning_rate_warmup_steps
  assert quick.batch_size == 2048 == recipe.batch_size // 2
  assert quick.replace(learning_rate_warmup_steps=recipe.learning_rate_warmup_steps,
                       learning_rate_constant=recipe.learning_rate_constant,
                       batch_size=recipe.batch_size) == recipe

  def rate(h, update):  # the schedule at 1-based update `update`
    schedule = TransformerSchedule(h.hidden_size, h.learning_rate_warmup_steps,
                                   h.learning_rate_schedule, h.learning_rate_constant)
    return float(schedule(update - 1))

  peak = rate(recipe, recipe.learning_rate_warmup_steps)
  assert abs(rate(quick, 400) / peak - 1) < 1e-3, (rate(quick, 400), peak)
  assert rate(quick, 200) < peak


def test_recipe_takes_the_interval_window_and_steps(copy):
  result, calls = run(copy, "multi30k_recipe.sh", TRAIN_STEPS="1500", SAVE_STEPS="100", AVERAGE="12",
                      DECODE="beam_size=8,alpha=1.0")
  assert result.returncode == 0, result.stderr
  trainer, = of(calls, "trainer")
  assert "--train_steps=1500 --save_checkpoints_steps=100 --keep_checkpoint_max=12 " in trainer
  assert "--train_minutes" not in trainer
  assert of(calls, "average")[0].endswith("--num_last_checkpoints=12 --avg_dir=runs/multi30k/averaged "
                                          "averaged=" + ",".join(f"ckpt-{s}" for s in range(400, 1501, 100)))
  assert "--decode_hparams=beam_size=8,alpha=1.0,extra_length=50,batch_size=64" in of(calls, "decoder")[0]



def test_curve_averages_the_checkpoints_ending_at_each_count_and_scores_val_and_test(copy):
  result, _ = run(copy, "multi30k_recipe.sh", TRAIN_STEPS="1500", SAVE_STEPS="100", KEEP_CHECKPOINTS="100")
  assert result.returncode == 0, result.stderr
  result, calls = run(copy, "multi30k_curve.sh", "800", "1500", SAVE_STEPS="100")
  assert result.returncode == 0, result.stderr
  raw = copy / "raw"
  assert [a.split(" averaged=")[1] for a in of(calls, "average")] == [
      "ckpt-400,ckpt-500,ckpt-600,ckpt-700,ckpt-800", "ckpt-1100,ckpt-1200,ckpt-1300,ckpt-1400,ckpt-1500"]
  assert of(calls, "average")[0].startswith(
      "--output_dir=runs/multi30k --checkpoints=ckpt-400,ckpt-500,ckpt-600,ckpt-700,ckpt-800 "
      "--prefix=runs/multi30k/ --avg_dir=runs/multi30k/curve/avg_800 ")
  assert [d.split(" --decode_to_file")[0] for d in of(calls, "decoder")] == [
      f"--output_dir=runs/multi30k/curve/avg_{n} --decode_from_file={raw}/{split}.en"
      for n in (800, 1500) for split in ("val", "test_2016_flickr")]
  assert all("--decode_hparams=beam_size=4,alpha=1.2,extra_length=50,batch_size=64" in d
             for d in of(calls, "decoder"))
  scored = re.findall(r"^== (\d+) updates, (\S+): sacreBLEU = ", result.stdout, re.M)
  assert scored == [(n, split) for n in ("800", "1500") for split in ("val", "test_2016_flickr")]
  # Each translation scored against its own split's reference.
  assert of(calls, "bleu") == [
      f"--translation=runs/multi30k/curve/avg_{n}/{split}.hyp.de --reference={raw}/{split}.de --lang=de"
      for n in (800, 1500) for split in ("val", "test_2016_flickr")]


def test_curve_reads_a_run_of_members_as_the_recipe_decodes_it(copy):
  """A run of ENSEMBLE members: at each count, each member's window averaged on its own and the
  averages decoded together (--ensemble_dirs), as the recipe decodes; a member missing a
  checkpoint is named before anything is averaged. Where ENSEMBLE=auto went on with one model,
  OUT/members names it and the curve reads that one alone."""
  result, _ = run(copy, "multi30k_recipe.sh", ENSEMBLE="2", TRAIN_STEPS="1500", SAVE_STEPS="100",
                  KEEP_CHECKPOINTS="100")
  assert result.returncode == 0, result.stderr
  result, calls = run(copy, "multi30k_curve.sh", "800", SAVE_STEPS="100")
  assert result.returncode == 0, result.stderr
  assert "reading 2 models as one ensemble: runs/multi30k/member_0 runs/multi30k/member_1" in result.stdout
  window = "ckpt-400,ckpt-500,ckpt-600,ckpt-700,ckpt-800"
  assert [a.split(" averaged=")[0] for a in of(calls, "average")] == [
      f"--output_dir=runs/multi30k/member_{i} --checkpoints={window} --prefix=runs/multi30k/member_{i}/ "
      f"--avg_dir=runs/multi30k/curve/avg_800/member_{i}" for i in range(2)]
  assert [d.split(" --decode_hparams")[0] for d in of(calls, "decoder")] == [
      "--output_dir=runs/multi30k/curve/avg_800/member_0 "
      "--ensemble_dirs=runs/multi30k/curve/avg_800/member_1 "
      f"--decode_from_file={copy / 'raw'}/{split}.en "
      f"--decode_to_file=runs/multi30k/curve/avg_800/{split}.hyp.de"
      for split in ("val", "test_2016_flickr")]
  (copy / "runs" / "multi30k" / "member_1" / "ckpt-500.index").unlink()
  result, calls = run(copy, "multi30k_curve.sh", "800", SAVE_STEPS="100")
  assert result.returncode == 2 and "runs/multi30k/member_1 has no ckpt-500" in result.stderr
  assert not of(calls, "average") and not of(calls, "decoder")
  (copy / "runs" / "multi30k" / "members").write_text("runs/multi30k/member_0\n")
  result, calls = run(copy, "multi30k_curve.sh", "800", SAVE_STEPS="100")
  assert result.returncode == 0, result.stderr
  averaged, = of(calls, "average")
  assert averaged.startswith("--output_dir=runs/multi30k/member_0 --checkpoints=")
  assert of(calls, "decoder")[0].startswith("--output_dir=runs/multi30k/curve/avg_800 --decode_from_file=")


@pytest.mark.parametrize("args, message", [
    ((), "give the update counts"),
    (("800", "12a"), "'12a' is not a number of updates"),
    (("300",), "300 updates hold no 5 checkpoints 100 apart"),
    (("800", "1550"), "has no ckpt-1150"),
])
def test_curve_rejects_counts_it_cannot_average_before_averaging_any(copy, args, message):
  result, _ = run(copy, "multi30k_recipe.sh", TRAIN_STEPS="1500", SAVE_STEPS="100", KEEP_CHECKPOINTS="100")
  assert result.returncode == 0, result.stderr
  result, calls = run(copy, "multi30k_curve.sh", *args, SAVE_STEPS="100")
  assert result.returncode == 2
  assert message in result.stderr
  assert not of(calls, "average") and not of(calls, "decoder")


def test_recipe_takes_a_problem_item_out_of_the_hparams(copy):
  result, calls = run(copy, "multi30k_recipe.sh", ENSEMBLE="1",
                      HPARAMS="multi30k,problem=translate_ende_multi30k4k,dropout=0.3")
  assert result.returncode == 0, result.stderr
  trainer, = of(calls, "trainer")
  assert trainer.startswith("--problem=translate_ende_multi30k4k ")
  assert " --hparams=multi30k,dropout=0.3 " in trainer

SETTINGS = """
base         -                                  200x5  beam_size=4,alpha=0.6
base_100x3   -                                  100x3  beam_size=4,alpha=0.6
base_beam1   -                                  200x5  beam_size=1
warm         learning_rate_warmup_steps=400     200x2  beam_size=4,alpha=0.6
"""


def test_tune_scores_val_and_averages_what_the_recipe_would(copy):
  result, calls = run(copy, "multi30k_tune.sh", SETTINGS=SETTINGS)
  assert result.returncode == 0, result.stderr
  raw = copy / "raw"
  # One training per hparams, every 100 updates, keeping what the widest average needs.
  trainers = of(calls, "trainer")
  assert len(trainers) == 2
  assert "--hparams=multi30k --output_dir=runs/multi30k_tune/55min/multi30k/model" in trainers[0]
  assert "--hparams=multi30k,learning_rate_warmup_steps=400 " in trainers[1]
  assert all("--train_minutes=55 --save_checkpoints_steps=100 --keep_checkpoint_max=10 " in t
             for t in trainers)
  # IxN: the last checkpoint and the newest N-1 before it at multiples of I; base_beam1 reuses
  # base's average.
  averages = [a.split("averaged=")[1] for a in of(calls, "average")]
  assert averages == ["ckpt-800,ckpt-1000,ckpt-1200,ckpt-1400,ckpt-1498", "ckpt-1300,ckpt-1400,ckpt-1498",
                      "ckpt-1400,ckpt-1498"]
  # Val only, never test; a translation is made once per model and decode setting.
  decoders = of(calls, "decoder")
  assert all(f"--decode_from_file={raw}/val.en " in d for d in decoders)
  assert all(f"--reference={raw}/val.de " in b for b in of(calls, "bleu"))
  assert not any("test_2016" in c for c in calls)
  assert len(decoders) == 2 + 1 + 2 + 2  # base: last, 200x5; base_100x3: 100x3; beam 1: both
  rows = table(copy)
  assert [r["setting"] for r in rows] == ["base", "base_100x3", "base_beam1", "warm"]
  assert rows[0]["val_bleu_last"] == rows[1]["val_bleu_last"] != rows[2]["val_bleu_last"]
  assert rows[0]["val_bleu_average"] != rows[1]["val_bleu_average"]
  assert {(r["budget"], r["steps"], r["commit"]) for r in rows} == {("55 min", "1498", "unknown")}
  assert rows[3]["hparams"] == "multi30k,learning_rate_warmup_steps=400"
  assert rows[3]["checkpoints"] == "200x2" and rows[3]["decode"] == "beam_size=4,alpha=0.6"
  for row in rows:
    float(row["val_bleu_last"]), float(row["val_bleu_average"]), float(row["train_minutes"])
    assert "cores" in row["cpu"] and row["date"][:2] == "20"
    assert row["cpu"].endswith("; float32, whole-step XLA")  # the training path, as recorded
  # A second run finds every setting in the table; a new budget is a new row.
  result, calls = run(copy, "multi30k_tune.sh", SETTINGS=SETTINGS)
  assert result.returncode == 0 and calls == [] and result.stdout.count("already in") == 4
  result, calls = run(copy, "multi30k_tune.sh", SETTINGS=SETTINGS, TRAIN_STEPS="1500", ONLY="warm")
  assert result.returncode == 0, result.stderr
  trainer, = of(calls, "trainer")
  assert "--train_steps=1500 --save" in trainer and "runs/multi30k_tune/1500steps/" in trainer
  # warm differs from the baseline in the learning rate's warmup only: the same rate, no rates
  # file needed, the baseline's steps.
  assert [(r["setting"], r["budget"], r["steps"]) for r in table(copy)][-1] == (
      "warm", "1500 steps matched by rate", "1500")


@pytest.mark.parametrize("last_step", [1400, 1498])
# 100x12 needs more than the 10 checkpoints a tuning run keeps at least.
@pytest.mark.parametrize("interval,count", [(200, 5), (100, 12), (200, 1)])
def test_tune_averages_the_checkpoints_the_recipe_averages(copy, last_step, interval, count):
  """IxN of a tuning run saved every 100 updates: the checkpoints the recipe with SAVE_STEPS=I and
  AVERAGE=N averages, whether the run stopped on a multiple of I or between two."""
  settings = f"s - {interval}x{count} beam_size=4\n"
  result, tune = run(copy, "multi30k_tune.sh", SETTINGS=settings, FAKE_LAST_STEP=str(last_step))
  assert result.returncode == 0, result.stderr
  result, recipe = run(copy, "multi30k_recipe.sh", SAVE_STEPS=str(interval), AVERAGE=str(count),
                       FAKE_LAST_STEP=str(last_step))
  assert result.returncode == 0, result.stderr
  tuned, = of(tune, "average")
  assert tuned.split("averaged=")[1] == of(recipe, "average")[0].split("averaged=")[1]
  assert tuned.split("averaged=")[1].count("ckpt-") == count


def test_tune_trains_a_limited_number_and_resumes_by_steps_only(copy):
  result, calls = run(copy, "multi30k_tune.sh", SETTINGS=SETTINGS, MAX_TRAININGS="1")
  assert result.returncode == 0, result.stderr
  assert len(of(calls, "trainer")) == 1 and len(table(copy)) == 3
  assert "warm: not trained yet" in result.stdout
  listing, calls = run(copy, "multi30k_tune.sh", "list", SETTINGS=SETTINGS)
  assert listing.returncode == 0 and calls == [], listing.stderr
  assert [line.split()[:2] for line in listing.stdout.splitlines()] == [
      ["base", "in"], ["base_100x3", "in"], ["base_beam1", "in"], ["warm", "to"]]
  # Interrupted: no row; under a time budget the rerun starts over, under TRAIN_STEPS it resumes.
  result, calls = run(copy, "multi30k_tune.sh", SETTINGS=SETTINGS, FAKE_EXIT="130")
  assert result.returncode == 130 and len(table(copy)) == 3
  result, calls = run(copy, "multi30k_tune.sh", SETTINGS=SETTINGS)
  assert result.returncode == 0, result.stderr
  assert of(calls, "trainer")[0].endswith("--overwrite_output_dir") and len(table(copy)) == 4
  result, _ = run(copy, "multi30k_tune.sh", SETTINGS=SETTINGS, TRAIN_STEPS="800", ONLY="warm",
                  FAKE_EXIT="130")
  assert result.returncode == 130
  result, calls = run(copy, "multi30k_tune.sh", SETTINGS=SETTINGS, TRAIN_STEPS="800", ONLY="warm")
  assert result.returncode == 0, result.stderr
  assert "--overwrite_output_dir" not in of(calls, "trainer")[0]


def test_tune_records_a_diverged_training_and_refuses_bad_settings(copy):
  settings = "hot  learning_rate_constant=9  200x2  beam_size=4\n"
  result, calls = run(copy, "multi30k_tune.sh", SETTINGS=settings)
  assert result.returncode == 0, result.stderr
  row, = table(copy)
  assert (row["steps"], row["val_bleu_last"], row["val_bleu_average"]) == ("diverged",) * 3
  assert of(calls, "decoder") == []
  for bad, message in (("a - 150x2 beam_size=4", "multiple of TUNE_SAVE_STEPS=100"),
                       ("a - 200 beam_size=4", "is not IxN"),
                       ("a - 200x2", "give 4 fields"),
                       ("a - 200x2 beam_size=4\na - 100x2 beam_size=4", "listed twice")):
    result, calls = run(copy, "multi30k_tune.sh", SETTINGS=bad)
    assert result.returncode == 2 and message in result.stderr and calls == [], bad
  result, _ = run(copy, "multi30k_tune.sh", SETTINGS=SETTINGS, ONLY="nope")
  assert result.returncode == 2 and "not a setting" in result.stderr
  result, _ = run(copy, "multi30k_tune.sh", "lst", SETTINGS=SETTINGS)
  assert result.returncode == 2 and "unknown argument 'lst'" in result.stderr
  # A run too short for the window: an error, no row and no average of other checkpoints.
  result, calls = run(copy, "multi30k_tune.sh", SETTINGS="short - 200x5 beam_size=4", TRAIN_STEPS="300")
  assert result.returncode != 0 and "too few for 5 of them 200 steps apart" in result.stderr
  assert of(calls, "average") == [] and len(table(copy)) == 1


RATE_SETTINGS = """
base         -                                               200x5  beam_size=4,alpha=0.6
base_beam1   -                                               200x5  beam_size=1
warm         learning_rate_warmup_steps=400                  200x5  beam_size=4,alpha=0.6
b2048        learning_rate_warmup_steps=400,batch_size=2048  200x5  beam_size=4,alpha=0.6
layers2      num_hidden_layers=2                             200x5  beam_size=4,alpha=0.6
"""
RATES_HEADER = ["training", "baseline", "updates_per_sec", "relative", "updates_timed", "cpu",
                "training_path", "date", "commit"]


def rates(folder):
  rows = [line.split("\t") for line in (folder / "scripts" / "multi30k_rates.tsv").read_text().splitlines()]
  assert rows[0] == RATES_HEADER
  return [dict(zip(RATES_HEADER, row)) for row in rows[1:]]


def flag(call, name):
  return call.split(f"--{name}=")[1].split()[0]


def test_tune_matches_steps_to_the_baselines_time_by_measured_rate(copy):
  # Under TRAIN_STEPS a setting whose training computes otherwise than the baseline's needs a
  # measured rate: without one, an error before anything trains, saying what to run.
  result, calls = run(copy, "multi30k_tune.sh", SETTINGS=RATE_SETTINGS, TRAIN_STEPS="1000")
  assert result.returncode == 2 and calls == [], result.stderr
  assert "b2048 (multi30k,batch_size=2048); layers2 (multi30k,num_hidden_layers=2)" in result.stderr
  assert "`bash scripts/multi30k_tune.sh rates` alone on the machine" in result.stderr
  # `rates`: the baseline and each training that computes otherwise, once (warm's warmup changes
  # no computation), from the trainer's updates/s of each update after the first RATE_SKIP (20);
  # the median, so that updates slowed by compiling a batch shape do not count.
  result, calls = run(copy, "multi30k_tune.sh", "rates", SETTINGS=RATE_SETTINGS, RATE_UPDATES="10")
  assert result.returncode == 0, result.stderr
  assert "Nothing else may run on this machine" in result.stdout
  trainers = of(calls, "trainer")
  assert [flag(t, "hparams") for t in trainers] == [
      "multi30k", "multi30k,batch_size=2048", "multi30k,num_hidden_layers=2"]
  for trainer in trainers:
    assert "--train_steps=30 --save_checkpoints_steps=30 " in trainer
    assert trainer.endswith(" --log_every=1 --eval_steps=0 --no_eval_bleu")
    assert flag(trainer, "output_dir").startswith("runs/multi30k_tune/rates/multi30k")
  rows = rates(copy)
  assert [(r["training"], r["baseline"], r["updates_per_sec"], r["relative"], r["updates_timed"])
          for r in rows] == [("multi30k", "multi30k", "2", "1.0000", "10"),
                             ("multi30k,batch_size=2048", "multi30k", "3.2", "1.6000", "10"),
                             ("multi30k,num_hidden_layers=2", "multi30k", "2.6", "1.3000", "10")]
  assert all("cores" in r["cpu"] and r["training_path"] == "float32, whole-step XLA" for r in rows)
  # Each setting trains round(1000 * its rate / the baseline's) updates; the table says so.
  result, calls = run(copy, "multi30k_tune.sh", SETTINGS=RATE_SETTINGS, TRAIN_STEPS="1000")
  assert result.returncode == 0, result.stderr
  assert {flag(t, "hparams"): flag(t, "train_steps") for t in of(calls, "trainer")} == {
      "multi30k": "1000", "multi30k,learning_rate_warmup_steps=400": "1000",
      "multi30k,learning_rate_warmup_steps=400,batch_size=2048": "1600",
      "multi30k,num_hidden_layers=2": "1300"}
  assert all(flag(t, "output_dir").startswith("runs/multi30k_tune/1000steps/") for t in of(calls, "trainer"))
  assert [(r["setting"], r["budget"], r["steps"]) for r in table(copy)] == [
      (name, "1000 steps matched by rate", steps) for name, steps in
      (("base", "1000"), ("base_beam1", "1000"), ("warm", "1000"), ("b2048", "1600"), ("layers2", "1300"))]
  # Measured again (here: edited), a rate matches other steps: a kept training of fewer
  # updates resumes up to them; one of more is an error, before anything trains.
  path = copy / "scripts" / "multi30k_rates.tsv"
  path.write_text(path.read_text().replace("\t3.2\t1.6000\t", "\t3.4\t1.7000\t"))
  more = RATE_SETTINGS + "b2048_beam1  learning_rate_warmup_steps=400,batch_size=2048  200x5  beam_size=1\n"
  listing, _ = run(copy, "multi30k_tune.sh", "list", SETTINGS=more, TRAIN_STEPS="1000", ONLY="b2048_beam1")
  assert "to train (1700 updates: 1000 steps matched by rate; resumes at 1600)" in listing.stdout
  result, calls = run(copy, "multi30k_tune.sh", SETTINGS=more, TRAIN_STEPS="1000", ONLY="b2048_beam1")
  assert result.returncode == 0, result.stderr
  trainer, = of(calls, "trainer")
  assert "--train_steps=1700 " in trainer and "--overwrite_output_dir" not in trainer
  assert table(copy)[-1]["steps"] == "1700"
  path.write_text(path.read_text().replace("\t3.4\t1.7000\t", "\t3.0\t1.5000\t"))
  more += "b2048_alpha1  learning_rate_warmup_steps=400,batch_size=2048  200x5  beam_size=4,alpha=1.0\n"
  result, calls = run(copy, "multi30k_tune.sh", SETTINGS=more, TRAIN_STEPS="1000", ONLY="b2048_alpha1")
  assert result.returncode == 2 and calls == [], result.stderr
  assert ("runs/multi30k_tune/1000steps/multi30k+learning_rate_warmup_steps-400+batch_size-2048 "
          "(1700 > 1500 steps)") in result.stderr
  # Under a time budget rates play no part.
  result, calls = run(copy, "multi30k_tune.sh", SETTINGS=more, ONLY="b2048_alpha1")
  assert result.returncode == 0 and "--train_minutes=55 " in of(calls, "trainer")[0], result.stderr


MEMBER_RATES_HEADER = ["training", "members", "updates_per_sec_alone", "updates_per_sec_each",
                       "slowest_share", "pinned", "updates_timed", "cpu", "training_path", "date",
                       "commit"]


def test_members_time_the_recipes_members_at_once_against_one_training_alone(copy):
  """`members`: ONLY's training alone, as `rates` times it, then ENSEMBLE (2) trainings of it at
  once started as the recipe starts its members (member 1 with seed=1, each pinned to a core where
  there are two), each timed from its own log; one row holds both rates and the slowest member's
  share of the lone rate (the stand-in: 2.6 for layers2 and its member 0, 1.1 for seed=1). A
  second run replaces the row; ENSEMBLE=1 is an error."""
  path = copy / "scripts" / "multi30k_member_rates.tsv"
  for _ in range(2):
    result, calls = run(copy, "multi30k_tune.sh", "members", SETTINGS=RATE_SETTINGS,
                        RATE_UPDATES="10", ONLY="layers2")
    assert result.returncode == 0, result.stderr
    assert "Nothing else may run on this machine" in result.stdout
    trainers = of(calls, "trainer")
    folder = "multi30k+num_hidden_layers-2/model"
    assert sorted((flag(t, "hparams"), flag(t, "output_dir")) for t in trainers) == [
        ("multi30k,num_hidden_layers=2", f"runs/multi30k_tune/members/{folder}/member_0"),
        ("multi30k,num_hidden_layers=2", f"runs/multi30k_tune/rates/{folder}"),
        ("multi30k,num_hidden_layers=2,seed=1", f"runs/multi30k_tune/members/{folder}/member_1")]
    assert all(t.endswith(" --log_every=1 --eval_steps=0 --no_eval_bleu") for t in trainers)
    lines = path.read_text().splitlines()
    assert lines[0].split("\t") == MEMBER_RATES_HEADER and len(lines) == 2, lines
    row = dict(zip(MEMBER_RATES_HEADER, lines[1].split("\t")))
    pinned = "yes" if len(os.sched_getaffinity(0)) >= 2 else "no"
    assert [row[k] for k in MEMBER_RATES_HEADER[:7]] == [
        "multi30k,num_hidden_layers=2", "2", "2.6", "2.6,1.1", f"{1.1 / 2.6:.3f}", pinned, "10"]
    assert "cores" in row["cpu"] and row["training_path"] == "float32, whole-step XLA"
  assert (f"the slowest {1.1 / 2.6:.3f} of one training's rate (1.42 times its updates together)"
          in result.stdout)
  result, calls = run(copy, "multi30k_tune.sh", "members", SETTINGS=RATE_SETTINGS, ENSEMBLE="1")
  assert result.returncode == 2 and calls == [] and "must be 2 or more" in result.stderr


def test_rates_take_the_median_update_time_of_the_timed_updates(copy):
  """`rates`' figure is one over the median time of the RATE_UPDATES updates after RATE_SKIP, the
  median of an even count the mean of its two middle times: against Python's statistics.median
  over the times the stand-in logs for updates 21-30 (eight at their own rate, updates 21 and 28
  ten times slower), whose two middle ones differ (0.6 and 0.65 s: 1.6 updates/s)."""
  result, _ = run(copy, "multi30k_tune.sh", "rates", SETTINGS="base - 200x5 beam_size=4",
                  RATE_UPDATES="10", FAKE_SPREAD="1")
  assert result.returncode == 0, result.stderr
  times = [10.0 if s % 7 == 0 else 1 / float(f"{2.0 / (1 + s % 5 / 10):.6g}") for s in range(21, 31)]
  assert sorted(times)[4:6] == pytest.approx([0.6, 0.65], rel=1e-5)
  row, = rates(copy)
  assert (row["training"], row["updates_per_sec"], row["relative"], row["updates_timed"]) == (
      "multi30k", f"{1 / statistics.median(times):.4g}", "1.0000", "10")


def test_trainings_of_the_same_work_share_the_mean_of_their_rates(copy):
  """Overrides in another order, or other dropouts above 0, compute the same: such trainings share
  their rate rows and train round(N x the rows' mean); a dropout of 0 is other work (no rate)."""
  result, _ = run(copy, "multi30k_tune.sh", "rates", SETTINGS=RATE_SETTINGS, RATE_UPDATES="10",
                  ONLY="b2048")
  assert result.returncode == 0, result.stderr
  path = copy / "scripts" / "multi30k_rates.tsv"
  header, baseline, measured = path.read_text().splitlines()
  assert measured.startswith("multi30k,batch_size=2048\tmulti30k\t3.2\t1.6000\t")
  other = measured.replace("multi30k,batch_size=2048\t", "multi30k,dropout=0.3,batch_size=2048\t")
  reordered = measured.replace("batch_size=2048\t", "batch_size=2048,dropout=0.2\t")
  # The mean, 1.7006, matches 1700.6 updates: rounded, 1701 (cut, 1700).
  other = other.replace("\t1.6000\t", "\t1.8012\t")
  # The same work measured on another CPU or against another baseline is no rate here.
  fields = reordered.split("\t")
  other_cpu = "\t".join(fields[:3] + ["4.0000", fields[4], "another CPU, 2 cores"] + fields[6:])
  other_baseline = "\t".join(fields[:1] + ["multi30k_tiny", fields[2], "4.0000"] + fields[4:])
  path.write_text("\n".join([header, baseline, reordered, other, other_cpu, other_baseline, ""]))
  settings = """
d1   batch_size=2048,dropout=0.1              200x5  beam_size=4,alpha=0.6
d25  dropout=0.25,batch_size=2048             200x5  beam_size=4,alpha=0.6
d0   batch_size=2048,dropout=0.0              200x5  beam_size=4,alpha=0.6
"""
  listing, _ = run(copy, "multi30k_tune.sh", "list", SETTINGS=settings, TRAIN_STEPS="1000")
  assert listing.returncode == 0, listing.stderr
  lines = {line.split()[0]: line for line in listing.stdout.splitlines() if line.strip()}
  assert "to train (1701 updates: 1000 steps matched by rate)" in lines["d1"]
  assert "to train (1701 updates: 1000 steps matched by rate)" in lines["d25"]
  assert "no rate" in lines["d0"]


def test_a_schedule_string_is_rate_neutral_and_its_long_folder_fits(copy):
  """T2T's schedule string (with '*') and learning_rate_decay_steps change no computation: the
  setting trains the baseline's updates without a rate of its own, in a folder whose name a file
  system takes (past 200 characters: the first 180 and a hash of the whole, one per hparams)."""
  from t2t_lite import cpu  # pylint: disable=import-outside-toplevel
  schedule = "learning_rate_schedule=constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size*linear_decay"
  long = f"hidden_size=128,filter_size=256,num_hidden_layers=4,{schedule},learning_rate_decay_steps="
  settings = f"""
base    -                  200x5  beam_size=4,alpha=0.6
d2000   {long}2000         200x5  beam_size=4,alpha=0.6
d1000   {long}1000         200x5  beam_size=4,alpha=0.6
"""
  rates_path = copy / "scripts" / "multi30k_rates.tsv"
  rates_path.write_text("\t".join(RATES_HEADER) + "\n" + "\t".join(
      ["multi30k,hidden_size=128,filter_size=256,num_hidden_layers=4", "multi30k", "4", "2.0000",
       "10", cpu.summary(), "float32, graph", "2026-11-27", "abc"]) + "\n")
  result, calls = run(copy, "multi30k_tune.sh", SETTINGS=settings, TRAIN_STEPS="1000")
  assert result.returncode == 0, result.stderr
  trainers = {flag(t, "hparams"): t for t in of(calls, "trainer")}
  assert [flag(t, "train_steps") for t in trainers.values()] == ["1000", "2000", "2000"]
  folders = [flag(t, "output_dir").split("/")[-2] for t in trainers.values()]
  assert folders[0] == "multi30k" and len(set(folders)) == 3
  assert all(len(f) <= 200 for f in folders), folders
  assert folders[1].startswith("multi30k+hidden_size-128+filter_size-256+num_hidden_layers-4+"
                               "learning_rate_schedule-constantxlinear_warmup")
  assert [r["steps"] for r in table(copy)] == ["1000", "2000", "2000"]


def test_the_trainer_logs_the_updates_per_second_that_rates_reads(tmp_path, monkeypatch, capsys,
                                                                   train_clock):
  """`rates` reads t2t-lite-trainer's "updates/s": the updates since the last log line over the
  time they took, an evaluation's time in neither (a fake clock: each update takes 0.25 s, the
  evaluation 10 s)."""
  import re  # pylint: disable=import-outside-toplevel
  from t2t_lite.hparams import get_hparams  # pylint: disable=import-outside-toplevel
  from t2t_lite.problems import get_problem  # pylint: disable=import-outside-toplevel
  from t2t_lite.training import train_loop  # pylint: disable=import-outside-toplevel

  now = train_clock  # each update takes 0.25 s
  # The evaluation's own work plays no part here: a stand-in, which saves tracing it. It takes
  # time on the clock, or a window that counted it would read the same rate.
  def evaluate(self, dataset, steps):
    now[0] += 10.0
    return {"loss": 1.0}

  monkeypatch.setattr(train_loop.Trainer, "evaluate", evaluate)
  hparams = get_hparams("transformer_tiny", "hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1,"
                        "batch_size=256,max_length=16,eval_bleu_examples=0")
  train_loop.train_and_evaluate(get_problem("algorithmic_copy"), hparams, str(tmp_path / "run"),
                                str(tmp_path / "data"), train_steps=6, eval_steps=1, eval_every=3,
                                save_checkpoints_steps=100, log_every=2, progress=False)
  lines = capsys.readouterr().out.splitlines()
  # What the rates mode's sed takes: "step N: ... updates/s R" at the end of the line.
  logged = [re.fullmatch(r"step (\d+): .* updates/s ([0-9.e+-]+)", line) for line in lines]
  rates = {int(m[1]): float(m[2]) for m in logged if m}
  # Step 4's window: the evaluation after step 3 began it, so 1 update in 0.25 s (from step 2's
  # line, evaluation included: 2 in 10.5 s).
  assert rates == {2: 4.0, 4: 4.0, 6: 4.0}, lines
