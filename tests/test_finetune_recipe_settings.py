"""The fine-tuning recipe (scripts/finetune_recipe.sh, docs/fine-tuning.md "Measured") with
stand-ins for the t2t-lite commands: each stage's corpus, minutes, hparams and flags as the docs
give them, written out here; every model of the table decoded with beam 4, alpha 0.6 on
test_2016_flickr and each table row naming the model it says; finished stages skipped and
decodes cached on a second run; fine-tuning before its general model an error. No test ran the
recipe before (its smoke mode trains for real and checks nothing of this)."""

import os
import pathlib
import shutil
import subprocess

import pytest

from stand_ins import LOG_CALL, read_calls, stand_in_venv

REPO = pathlib.Path(__file__).resolve().parent.parent

FLAGS = LOG_CALL + ('for a in "$@"; do case $a in --*=*) k=${a%%=*}; declare "f_${k#--}=${a#*=}" ;; '
                    'esac; done\n')
# The trainer writes the checkpoint index of 1,234 updates and a best/ at update 1,000; averaging
# writes its directory's index; the decoder writes the model directory it decoded as its
# translation, and "sacreBLEU" (the python stand-in) prints the translation: so each BLEU figure
# of the table is the model directory that was decoded for it.
TRAINER = FLAGS + """mkdir -p "$f_output_dir/best"
echo 'model_checkpoint_path: "ckpt-1234"' > "$f_output_dir/checkpoint"
echo '{"step": 1000}' > "$f_output_dir/best/best.json"
"""
AVERAGE = FLAGS + 'mkdir -p "$f_avg_dir" && touch "$f_avg_dir/checkpoint"\n'
DECODER = FLAGS + 'echo "$f_output_dir" > "$f_decode_to_file"\n'
PYTHON = LOG_CALL + """case "$2" in
  sacrebleu) shift 2; while [ "$1" != -i ]; do shift; done; cat "$2" ;;
  t2t_lite.cpu) echo "a stand-in CPU" ;;
  *) exit 3 ;;
esac
"""

MINUTES = {"general": "30", "finetuned": "25", "alone": "55", "ema": "55"}


@pytest.fixture
def recipe(tmp_path):
  """A function running the recipe in a folder with stand-ins and made-up corpora: (returncode,
  stdout, stderr, {command: [its flags as a dict]} of that run)."""
  (tmp_path / "scripts").mkdir()
  shutil.copy(REPO / "scripts" / "finetune_recipe.sh", tmp_path / "scripts")
  stand_in_venv(tmp_path, {"python": "#!/usr/bin/env bash\n" + PYTHON,
                           "t2t-lite-trainer": "#!/usr/bin/env bash\n" + TRAINER,
                           "t2t-lite-avg-checkpoints": "#!/usr/bin/env bash\n" + AVERAGE,
                           "t2t-lite-decoder": "#!/usr/bin/env bash\n" + DECODER})
  shared = tmp_path / "shared"
  for corpus, splits in (("multi30k", ("train", "val", "test_2016_flickr")), ("tatoeba", ("train",))):
    (shared / corpus).mkdir(parents=True)
    for split in splits:
      for lang in ("en", "de"):
        (shared / corpus / f"{split}.{lang}").write_text(f"{corpus} {split} {lang}\n" * 3)
  calls = tmp_path / "calls.log"

  def run(**settings):
    environment = {k: v for k, v in os.environ.items() if not k.endswith(("_MINUTES", "_STEPS"))
                   and k not in ("SHARED_DATA", "CORPUS", "OUT", "DATA_DIR", "STAGES", "HPARAMS",
                                 "EMA_DECAY", "PATIENCE", "DECODE_LINES", "EVAL_BLEU_EXAMPLES")}
    environment.update(CALLS=str(calls), SHARED_DATA=str(shared), OUT=str(tmp_path / "out"),
                       **settings)
    calls.write_text("")
    result = subprocess.run(["bash", str(tmp_path / "scripts" / "finetune_recipe.sh")],
                            capture_output=True, text=True, timeout=60, env=environment)
    return result.returncode, result.stdout, result.stderr, read_calls(calls)

  run.out = tmp_path / "out"
  run.shared = shared
  return run


def test_each_stage_trains_what_the_docs_say(recipe):
  status, _, stderr, logged = recipe()
  assert status == 0, stderr
  out = recipe.out
  general, finetuned, alone, ema = logged["trainer"]
  assert [t["output_dir"] for t in logged["trainer"]] == [
      f"{out}/general_tatoeba", f"{out}/finetuned_tatoeba", f"{out}/multi30k_alone",
      f"{out}/multi30k_ema"]
  for stage, trainer in zip(MINUTES, logged["trainer"]):
    assert trainer["train_minutes"] == MINUTES[stage], stage
    assert trainer["problem"] == "translate_ende_multi30k", stage
    assert trainer["save_checkpoints_steps"] == "200", stage  # the 5 averaged: 1,000 updates
  # The general model: Tatoeba's pairs, Multi30k's dev and test beside them (in-domain dev BLEU).
  raw = pathlib.Path(general["raw_data_dir"])
  assert os.path.realpath(raw / "train.en") == str(recipe.shared / "tatoeba" / "train.en")
  assert os.path.realpath(raw / "val.de") == str(recipe.shared / "multi30k" / "val.de")
  assert general["hparams"] == "multi30k,eval_bleu_examples=100"
  # Fine-tuned from it on Multi30k, with its hparams (only the dev BLEU's size given).
  assert finetuned["warm_start_from"] == general["output_dir"]
  assert finetuned["raw_data_dir"] == f"{recipe.shared}/multi30k"
  assert finetuned["hparams"] == "eval_bleu_examples=100"
  assert finetuned["data_dir"] != general["data_dir"]  # the general vocabulary's ids, apart
  # Multi30k alone with early stopping, and with the weights' moving average.
  assert alone["raw_data_dir"] == ema["raw_data_dir"] == f"{recipe.shared}/multi30k"
  assert alone["hparams"] == "multi30k,eval_bleu_examples=100"
  assert alone["eval_early_stopping_steps"] == "3000"
  assert ema["hparams"] == "multi30k,eval_bleu_examples=100,weight_ema_decay=0.999"
  last5, best5 = logged["avg-checkpoints"]
  assert last5["output_dir"] == best5["output_dir"] == alone["output_dir"]
  assert last5["num_last_checkpoints"] == best5["num_last_checkpoints"] == "5"
  assert "end_at_best" in best5 and "end_at_best" not in last5


def test_each_row_of_the_table_scores_its_own_model(recipe):
  status, stdout, stderr, logged = recipe()
  assert status == 0, stderr
  out = recipe.out
  decoders = logged["decoder"]
  assert len(decoders) == 7
  for decoder in decoders:
    assert decoder["decode_from_file"] == f"{recipe.shared}/multi30k/test_2016_flickr.en"
    assert decoder["decode_hparams"] == "beam_size=4,alpha=0.6,extra_length=50,batch_size=64"
  scored = [c for c in logged["python"] if "sacrebleu" in c]
  assert len(scored) == 7
  table = stdout[stdout.index("== in-domain sacreBLEU"):]
  expected = {
      "general (tatoeba), no fine-tuning": f"{out}/general_tatoeba",
      "general (tatoeba) fine-tuned on Multi30k (last checkpoint)": f"{out}/finetuned_tatoeba",
      "Multi30k alone (last checkpoint)": f"{out}/multi30k_alone",
      "Multi30k alone, average of the last 5 (the recipe)": f"{out}/multi30k_alone_last5",
      "Multi30k alone, best/ by dev BLEU (step 1000)": f"{out}/multi30k_alone/best",
      "Multi30k alone, average of the 5 ending at best/": f"{out}/multi30k_alone_best5",
      "Multi30k, EMA of the weights (decay 0.999, last checkpoint)": f"{out}/multi30k_ema",
  }
  rows = dict(line.rsplit(": ", 1) for line in table.splitlines()[5:])
  assert rows == expected
  for stage in ("general_tatoeba", "finetuned_tatoeba", "multi30k_alone", "multi30k_ema"):
    assert f"{stage}: minutes " in table and "1234 updates" in table


def test_a_second_run_skips_finished_stages_and_cached_decodes(recipe):
  first = recipe()
  assert first[0] == 0, first[2]
  status, stdout, stderr, logged = recipe()
  assert status == 0, stderr
  assert "trainer" not in logged and "decoder" not in logged and "avg-checkpoints" not in logged
  assert stdout.count("finished before") == 4
  table = lambda text: text[text.index("== in-domain sacreBLEU"):]
  assert table(stdout) == table(first[1])


def test_fine_tuning_before_the_general_model_is_an_error(recipe):
  status, _, stderr, logged = recipe(STAGES="finetuned")
  assert status == 2
  assert "run STAGES=general first" in stderr
  assert "trainer" not in logged
