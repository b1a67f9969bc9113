"""End to end with the commands a user types: train, average, decode, score, export, serve.

On a 2,000-pair slice of Multi30k with tiny settings (the translations are poor; the plumbing
is what is checked), and the WMT14 recipe's real commands in their dry-run form.
"""

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import sacrebleu
import tensorflow as tf

from t2t_lite.bin import avg_checkpoints, bleu, decoder, exporter, trainer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_multi30k_train_average_decode_score_export_serve(multi30k_slice, tmp_path, capsys):
  out, data = tmp_path / "model", tmp_path / "data"
  assert trainer.main([
      "--problem=translate_ende_multi30k", f"--raw_data_dir={multi30k_slice}", f"--data_dir={data}",
      f"--output_dir={out}", "--hparams=multi30k,hidden_size=64,filter_size=128,num_hidden_layers=1,"
      "batch_size=1024,eval_bleu_examples=10", "--train_steps=20", "--save_checkpoints_steps=5",
      "--eval_every=20", "--eval_steps=2", "--log_every=10"]) == 0
  printed = capsys.readouterr().out
  assert "eval at step 20" in printed and "bleu" in printed and "perplexity" in printed
  assert tf.train.latest_checkpoint(str(out)).endswith("ckpt-20")
  assert os.listdir(out / "train") and os.listdir(out / "eval")  # TensorBoard event files

  assert avg_checkpoints.main([f"--output_dir={out}", "--num_last_checkpoints=3",
                               f"--avg_dir={out}/averaged"]) == 0
  # The first 24 test lines: the commands' plumbing, with fewer search shapes to compile.
  source, reference = tmp_path / "test.en", tmp_path / "test.de"
  for lang, path in (("en", source), ("de", reference)):
    lines = (multi30k_slice / f"test_2016_flickr.{lang}").read_text(encoding="utf-8").split("\n")[:24]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  hyp = tmp_path / "test.hyp.de"
  # A source limit of 32 subwords (the default is 256), the same for the decoder and the export:
  # the exported graph traces a search per width bucket, 2 rather than 5 (two of Multi30k's 24
  # lines are longer, and truncated alike by both: alone, 39.0 s -> 32.6 s of process CPU).
  decode = "--decode_hparams=beam_size=4,alpha=0.6,extra_length=20,max_input_size=32"
  assert decoder.main([f"--output_dir={out}/averaged", f"--decode_from_file={source}",
                       f"--decode_to_file={hyp}", decode,
                       f"--decode_reference={reference}"]) == 0
  reported = capsys.readouterr().err
  lines = hyp.read_text(encoding="utf-8").split("\n")[:-1]
  assert len(lines) == 24
  assert bleu.main([f"--translation={hyp}", f"--reference={reference}"]) == 0
  scored = capsys.readouterr().out
  assert "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp" in scored
  # --decode_reference scored the translations it wrote against the reference: sacreBLEU computed
  # here on the two files, and both of its lines as t2t-lite-bleu prints them for those files.
  references = reference.read_text(encoding="utf-8").split("\n")[:-1]
  expected = sacrebleu.corpus_bleu(lines, [references]).score
  assert expected < 90   # a poor model's: not the 100 of the reference scored against itself
  assert re.search(r"^sacreBLEU = ([\d.]+) ", reported, re.M).group(1) == f"{expected:.2f}"
  report = [line for line in reported.split("\n") if line.startswith(("sacreBLEU = ", "tokenized BLEU = "))]
  assert len(report) == 2 and report == scored.split("\n")[:2]

  assert exporter.main([f"--output_dir={out}/averaged", f"--export_dir={tmp_path}/export", decode,
                        "--version=1"]) == 0
  serve = tf.saved_model.load(str(tmp_path / "export" / "1")).signatures["serving_default"]
  first = source.read_text(encoding="utf-8").split("\n")[:3]
  served = [t.decode("utf-8") for t in serve(text=tf.constant(first))["translations"].numpy()]
  assert served == lines[:3]


def _dry_run_env(shared_data, folder, **extra):
  """The recipe's dry run into `folder`; the module's runs share one stand-in corpus. (Sharing one
  XLA cache folder between the two runs' decoders was tried: 197 s for both tests alone against 179
  s without, 2026-11-25, so each run compiles its own.)"""
  return dict(extra, DRY_RUN="1", OUT_DRY=str(folder / "model"), STAND_IN_DIR=str(folder.parent / "stand_in"),
              NEWSTEST_DIR=str(shared_data / "wmt14"),
              PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])


@pytest.fixture(scope="module")
def one_gpu_dry_run(shared_data, tmp_path_factory):
  """`big 1gpu` in the dry run, its training only (DRY_RUN_TRAIN_ONLY): (its folder, the finished
  process). Its data dir holds the vocabulary that the module's other dry run starts from (the
  same corpus, the same file). What follows training in the recipe (average, decode, score) is
  the same commands in every mode: the multiworker run's chief runs them (each run of them cost
  about 23 s alone: the decoder's compilations most of it)."""
  folder = tmp_path_factory.mktemp("wmt14") / "1gpu"
  env = dict(os.environ, **_dry_run_env(shared_data, folder, DATA_DIR=str(folder / "data"),
                                        DRY_RUN_TRAIN_ONLY="1"))
  result = subprocess.run(["bash", os.path.join(REPO, "scripts", "wmt14_recipe.sh"), "big", "1gpu"],
                          capture_output=True, text=True, env=env, timeout=600)
  return folder, result


def test_wmt14_recipe_commands_run_in_dry_run(one_gpu_dry_run):
  """One machine: big with gradient accumulation (1gpu), trained to its last checkpoint. `base
  8gpu` runs, in the dry run (no GPU flags here), the commands each worker of the multiworker
  test below runs."""
  folder, result = one_gpu_dry_run
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  assert "eval at step 4" in result.stdout and "not averaging" in result.stdout
  assert tf.train.latest_checkpoint(str(folder / "model")).endswith("ckpt-4")
  with open(folder / "model" / "hparams.json", encoding="utf-8") as f:
    assert '"gradient_accumulation_steps": 8' in f.read()


def test_wmt14_multiworker_recipe_runs_in_dry_run(shared_data, one_gpu_dry_run, worker_envs):
  """Two worker processes on 127.0.0.1, as on two machines; the chief averages, decodes, scores
  (the recipe's part after training, the same in every mode: the 1gpu run above stops before it).
  Each worker's data dir is a copy of the 1gpu run's (its vocabulary: the one each would build
  from the same stand-in corpus; building it is the 1gpu run's part)."""
  one_gpu, _ = one_gpu_dry_run
  assert [n for n in os.listdir(one_gpu / "data") if n.startswith("vocab.translate_ende.")]
  tmp_path = one_gpu.parent / "multiworker"
  procs = []
  envs = worker_envs(2, **_dry_run_env(shared_data, tmp_path))
  for index, env in enumerate(envs):
    env["DATA_DIR"] = str(tmp_path / f"data{index}")
    shutil.copytree(one_gpu / "data", env["DATA_DIR"])
    recipe = os.path.join(REPO, "scripts", "wmt14_recipe.sh")
    procs.append(subprocess.Popen(["bash", recipe, "base", "multiworker"], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, env=env))
  outputs = [p.communicate(timeout=600)[0] for p in procs]
  assert all(p.returncode == 0 for p in procs), "\n\n".join(o[-3000:] for o in outputs)
  assert "sacreBLEU" in outputs[0] and "tokenized BLEU" in outputs[0] and "not the chief" in outputs[1]
  assert not [o for o in outputs if "was built from" in o]   # the copied vocabulary fits this corpus
  # The trainer command trained on both workers: worker 1 saved what it holds to its own folder,
  # the same weights as the chief's last checkpoint.
  out = tmp_path / "model"
  assert tf.train.latest_checkpoint(str(out)).endswith("ckpt-4")
  assert tf.train.latest_checkpoint(str(out / "averaged"))
  readers = [tf.train.load_checkpoint(tf.train.latest_checkpoint(str(folder)))
             for folder in (out, out / ".worker_1")]
  names = [n for n in readers[0].get_variable_to_shape_map() if n.startswith("model/")]
  assert len(names) > 10 and readers[1].get_variable_to_shape_map().keys() >= set(names)
  for name in names:
    np.testing.assert_array_equal(readers[0].get_tensor(name), readers[1].get_tensor(name))
