"""The WMT14 recipe's real settings, with stand-ins for the t2t-lite commands: the paper's set,
train steps, GPUs (or gradient accumulation standing in for them), checkpoint averaging and beam
decoding. Its dry run (tests/test_end_to_end.py) swaps all of these for tiny ones, so they are
checked here, against the paper's values written out (Vaswani et al. 2017, section 5 and 6.1;
T2T's transformer_base_v1 / transformer_big_v1), not read from the script."""

import os
import pathlib
import shutil
import subprocess

import pytest

from stand_ins import LOG_CALL, read_calls, stand_in_venv

REPO = pathlib.Path(__file__).resolve().parent.parent


# The paper's runs: the hparams set (T2T's name, or this project's alias of it), the updates, the
# checkpoints averaged. Both on 8 GPUs' worth of batch: 8 GPUs, or 1 with 8-step accumulation.
PAPER = {
    "base": {"sets": ("transformer_base_v1", "base_v1"), "steps": "100000", "average": "5"},
    "big": {"sets": ("transformer_big_v1", "big_v1"), "steps": "300000", "average": "20"},
}
DEVICES = {"8gpu": {"worker_gpu": "8", "accumulation": None},
           "1gpu": {"worker_gpu": "1", "accumulation": "8"}}


@pytest.fixture
def copy(tmp_path):
  """The recipe in a folder of its own, with stand-ins for the commands on the PATH its venv sets,
  and newstest2014 files."""
  (tmp_path / "scripts").mkdir()
  shutil.copy(REPO / "scripts" / "wmt14_recipe.sh", tmp_path / "scripts" / "wmt14_recipe.sh")
  stand_in_venv(tmp_path, {f"t2t-lite-{command}": "#!/usr/bin/env bash\n" + LOG_CALL
                           for command in ("trainer", "avg-checkpoints", "decoder", "bleu")})
  newstest = tmp_path / "wmt14"
  newstest.mkdir()
  for lang in ("en", "de"):
    (newstest / f"newstest2014.{lang}").write_text(f"line {lang}\n")
  return tmp_path


def run(folder, model, mode):
  """Runs the recipe for MODEL and MODE, not as a dry run; {command: [its flags as a dict]}."""
  environment = {k: v for k, v in os.environ.items()
                 if k not in ("DRY_RUN", "DRY_RUN_TRAIN_ONLY", "OUT", "OUT_DRY", "STAND_IN_DIR", "TF_CONFIG")}
  environment.update(CALLS=str(folder / "calls.log"), DATA_DIR=str(folder / "data"),
                     NEWSTEST_DIR=str(folder / "wmt14"))
  result = subprocess.run(["bash", str(folder / "scripts" / "wmt14_recipe.sh"), model, mode],
                          capture_output=True, text=True, timeout=60, env=environment)
  assert result.returncode == 0, result.stderr
  return read_calls(folder / "calls.log")


@pytest.mark.parametrize("model", ["base", "big"])
@pytest.mark.parametrize("mode", ["8gpu", "1gpu"])
def test_recipe_trains_averages_and_decodes_with_the_papers_settings(copy, model, mode):
  paper, devices = PAPER[model], DEVICES[mode]
  calls = run(copy, model, mode)
  assert sorted(calls) == ["avg-checkpoints", "bleu", "decoder", "trainer"]
  assert all(len(c) == 1 for c in calls.values()), calls
  (trainer,), (average,), (decoder,), (bleu,) = (calls[c] for c in ("trainer", "avg-checkpoints",
                                                                     "decoder", "bleu"))
  # Training: the paper's set, unchanged but for the accumulation, for the paper's updates.
  name, *changes = trainer["hparams"].split(",")
  assert name in paper["sets"]
  accumulation = devices["accumulation"]
  assert changes == ([f"gradient_accumulation_steps={accumulation}"] if accumulation else [])
  assert trainer["train_steps"] == paper["steps"]
  assert trainer["worker_gpu"] == devices["worker_gpu"]
  assert trainer["problem"] == "translate_ende"
  assert "raw_data_dir" not in trainer
  assert int(trainer["keep_checkpoint_max"]) >= int(paper["average"])
  # The last 5 (base) / 20 (big) checkpoints of that training averaged, and the average decoded.
  assert average["output_dir"] == trainer["output_dir"]
  assert average["num_last_checkpoints"] == paper["average"]
  assert decoder["output_dir"] == average["avg_dir"]
  # Beam 4, length penalty alpha 0.6, up to input length + 50, on all of newstest2014.
  decode = dict(h.split("=", 1) for h in decoder["decode_hparams"].split(","))
  assert (decode["beam_size"], decode["alpha"], decode["extra_length"]) == ("4", "0.6", "50")
  assert decoder["decode_from_file"] == str(copy / "wmt14" / "newstest2014.en")
  assert bleu == {"translation": decoder["decode_to_file"],
                  "reference": str(copy / "wmt14" / "newstest2014.de"), "lang": "de"}
