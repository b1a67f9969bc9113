"""The parsing recipe's real settings (docs/parsing.md, "The recipe: dev figures"), with stand-ins
for the t2t-lite commands: the problem and hparams that gave 73.87 F1 on dev, its minutes,
checkpoints and averaging, and the four decodes of its table, each scored on dev with its own
settings; the table's figures are read from the scorer's real output format. No test ran the
recipe before: a recipe decoding the last checkpoint twice, or scoring the paper's unconstrained
search with --require_well_formed (which exits 1 on its repaired trees), passed. And its tuning
script (scripts/parsing_tune.sh): the held-out slice it tunes on is training files only, never a
dev tree, as the real treebank reader splits its folder."""

import collections
import os
import pathlib
import shutil
import subprocess

import pytest

from stand_ins import LOG_CALL, read_calls, stand_in_venv
from t2t_lite.parsing import evalb, treebank

REPO = pathlib.Path(__file__).resolve().parent.parent

# The recipe of docs/parsing.md's dev table, written out: TRAIN_MINUTES=60 of
# transformer_parsing_cpu on the `words` linearization, the last 5 checkpoints (every 200
# updates) averaged, then each row's model and decode settings.
TRAINING = {"problem": "parsing_english_ptb16k", "hparams": "transformer_parsing_cpu",
            "train_minutes": "60", "save_checkpoints_steps": "200"}
AVERAGED = 5
ROWS = {  # name: (averaged model?, decode hparams after batch_size=16, scored as well-formed?)
    "constrained": (True, "beam_size=4,alpha=0.6", True),
    "last checkpoint": (False, "beam_size=4,alpha=0.6", True),
    "greedy": (True, "beam_size=1", True),
    "paper": (True, "constrained=false,beam_size=21,alpha=0.3,extra_length=300", False),
}

# What t2t-lite-parse-eval prints for a decode, from its own classes: 150 of 200 test brackets
# matched, 240 gold: P 75.00 R 62.50 F1 68.18; 272 of 273 leaf counts right; 1 tree repaired.
SCORES = evalb.Scores(matched=150, gold_brackets=240, test_brackets=200, sentences=273)
DECODED = evalb.DecodedScores(evalb.EvalbResult(all=SCORES, short=SCORES), repaired=1,
                              repairs=collections.Counter({"leaves": 1}), leaf_count_right=272)

PARSE_EVAL = LOG_CALL + f"""for a in "$@"; do case $a in --decoded=*) cat <<'EOF'
{DECODED}
EOF
;; esac; done
"""


@pytest.fixture
def calls(tmp_path):
  """Runs the recipe (its defaults) with stand-ins; {command: [its flags as a dict]}, and stdout."""
  (tmp_path / "scripts").mkdir()
  shutil.copy(REPO / "scripts" / "parsing_recipe.sh", tmp_path / "scripts")
  (tmp_path / "scripts" / "setup.sh").write_text(LOG_CALL)
  stand_in_venv(tmp_path, {
      "python": "#!/usr/bin/env bash\n" + LOG_CALL + 'echo "all sentences: the baseline"\n',
      "t2t-lite-parse-eval": "#!/usr/bin/env bash\n" + PARSE_EVAL,
      **{f"t2t-lite-{c}": "#!/usr/bin/env bash\n" + LOG_CALL
         for c in ("trainer", "avg-checkpoints", "decoder")}})
  environment = {k: v for k, v in os.environ.items()
                 if k not in ("RAW_DATA_DIR", "OUT", "DATA_DIR", "TRAIN_MINUTES", "PROBLEM",
                              "HPARAMS", "SAVE_CHECKPOINTS_STEPS", "AVERAGE", "DECODE", "SPLIT",
                              "EVALB")}
  environment["CALLS"] = str(tmp_path / "calls.log")
  result = subprocess.run(["bash", str(tmp_path / "scripts" / "parsing_recipe.sh")],
                          capture_output=True, text=True, timeout=60, env=environment)
  assert result.returncode == 0, result.stderr
  return read_calls(tmp_path / "calls.log"), result.stdout


def test_recipe_trains_the_documented_set_and_averages_its_last_checkpoints(calls):
  logged, _ = calls
  (trainer,), (average,) = logged["trainer"], logged["avg-checkpoints"]
  assert {k: trainer[k] for k in TRAINING} == TRAINING
  assert int(trainer["keep_checkpoint_max"]) >= AVERAGED  # the averaged ones are still there
  assert "no_eval_bleu" in trainer  # BLEU of linearized trees is not the metric
  assert average["output_dir"] == trainer["output_dir"]
  assert average["num_last_checkpoints"] == str(AVERAGED)
  assert logged["python"][0]["split"] == "dev"  # the floors printed first, on the same split


def test_recipe_decodes_and_scores_each_row_of_its_table_on_dev(calls):
  logged, stdout = calls
  trainer, average = logged["trainer"][0], logged["avg-checkpoints"][0]
  writer, *scorers = logged["parse-eval"]
  assert writer["split"] == "dev" and "decoded" not in writer
  decoders = logged["decoder"]
  assert len(decoders) == len(scorers) == len(ROWS)
  for (name, (averaged, settings, well_formed)), decoder, scorer in zip(ROWS.items(), decoders,
                                                                        scorers):
    assert decoder["output_dir"] == (average["avg_dir"] if averaged else trainer["output_dir"]), name
    assert decoder["decode_hparams"] == f"batch_size=16,{settings}", name
    assert decoder["decode_from_file"] == writer["write_inputs"], name
    assert scorer["decoded"] == decoder["decode_to_file"], name
    assert scorer["split"] == "dev" and scorer["gold_dir"] == writer["gold_dir"], name
    assert ("require_well_formed" in scorer) == well_formed, name
  table = stdout[stdout.index("== parsing_english_ptb16k, transformer_parsing_cpu, dev split"):]
  rows = table.splitlines()[1:]
  assert [r[:16].strip() for r in rows] == list(ROWS)
  for row in rows:
    assert "P/R/F1 75.00 62.50 68.18" in row and "leaf count right 99.6%" in row, row
    assert row.split("repaired")[1].split()[0] == "1", row


def test_tuning_scores_a_slice_of_the_training_files_never_the_dev_split(tmp_path):
  """scripts/parsing_tune.sh trains on wsj_0001-0149 and scores wsj_0150-0159, training files
  held out (docs/parsing.md: settings chosen "never on dev"): its folder of links, split by the
  treebank reader itself, must give exactly that; each model and decode setting is scored."""
  (tmp_path / "scripts").mkdir()
  shutil.copy(REPO / "scripts" / "parsing_tune.sh", tmp_path / "scripts")
  (tmp_path / "scripts" / "setup.sh").write_text(LOG_CALL)
  stand_in_venv(tmp_path, {
      "t2t-lite-parse-eval": "#!/usr/bin/env bash\n" + PARSE_EVAL,
      **{f"t2t-lite-{c}": "#!/usr/bin/env bash\n" + LOG_CALL
         for c in ("trainer", "avg-checkpoints", "decoder")}})
  sample = tmp_path / "ptb_sample"  # the WSJ sample's 179 files, each holding its own number
  sample.mkdir()
  for i in range(1, 180):
    (sample / f"wsj_{i:04d}.mrg").write_text(f"{i}\n")
  root = tmp_path / "tune"
  environment = {k: v for k, v in os.environ.items()
                 if k not in ("PROBLEM", "HPARAMS", "STEPS", "SAVE", "AVERAGE", "DECODES", "USR_DIR")}
  environment.update(CALLS=str(tmp_path / "calls.log"), SAMPLE=str(sample), ROOT=str(root),
                     NAME="words")
  result = subprocess.run(["bash", str(tmp_path / "scripts" / "parsing_tune.sh")],
                          capture_output=True, text=True, timeout=60, env=environment)
  assert result.returncode == 0, result.stderr

  split = treebank.layout(str(root / "treebank"))
  held_out = lambda name: sorted(int(pathlib.Path(p).read_text()) for p in split[name])
  assert held_out("train") == list(range(1, 150))
  assert held_out("dev") == list(range(150, 160))
  calls = [line.split(" ") for line in (tmp_path / "calls.log").read_text().splitlines()]
  trainer = next(c for c in calls if c[0] == "t2t-lite-trainer")
  assert f"--raw_data_dir={root}/treebank" in trainer
  assert "--hparams=transformer_parsing_cpu" in trainer and "--train_steps=1200" in trainer
  scored = [c for c in calls if c[0] == "t2t-lite-parse-eval"]
  assert all(f"--gold_dir={root}/treebank" in c and "--split=dev" in c for c in scored)
  rows = [line.split("\t") for line in (root / "results.tsv").read_text().splitlines()]
  assert [(r[4], r[5], r[6]) for r in rows] == [
      (model, setting, "68.18") for model in ("last", "averaged")
      for setting in ("beam_size=1", "beam_size=8,alpha=0.6")]
  decoders = [c for c in calls if c[0] == "t2t-lite-decoder"]
  assert [c[1] for c in decoders] == [f"--output_dir={root}/words"] * 2 + \
      [f"--output_dir={root}/words/averaged"] * 2
