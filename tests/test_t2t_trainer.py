"""The trainer's T2T flags: what each one does here, the schedules, and T2T's README walkthrough."""

import json
import os
import shutil
import types
from unittest import mock

import pytest
import tensorflow as tf
from conftest import TINY_TEST_HPARAMS

from t2t_lite.bin import bleu, common, datagen, decoder, trainer
from t2t_lite.decoding import dev_bleu
from t2t_lite.training import distribute, train_loop

# T2T's --hparams: the walkthrough says "add --hparams='batch_size=1024'" if memory is short.
T2T_TINY = ["--model=transformer", "--hparams_set=transformer_tiny", f"--hparams={TINY_TEST_HPARAMS}"]


@pytest.fixture
def captured(monkeypatch):
  """Runs trainer.main up to training and returns what it would train with."""
  calls = {}

  def fake_train(problem, hparams, output_dir, **kwargs):
    calls.update(problem=problem, hparams=hparams, output_dir=output_dir, **kwargs)
    return {"step": 0}

  def fake_strategy(worker_gpu, tpu):
    calls.update(worker_gpu=worker_gpu, tpu=tpu)
    return tf.distribute.get_strategy()

  def fake_bleu(problem, data_dir, examples, decode_hparams, split):
    calls.update(bleu_decode_hparams=decode_hparams, bleu_split=split)
    return "bleu"

  monkeypatch.setattr(train_loop, "train_and_evaluate", fake_train)
  monkeypatch.setattr(distribute, "make_strategy", fake_strategy)
  monkeypatch.setattr(dev_bleu, "bleu_evaluation", fake_bleu)

  def run(*flags):
    calls.clear()
    assert trainer.main(["--problem=translate_ende_multi30k", "--raw_data_dir=x",
                         "--output_dir=x", *flags]) == 0
    return calls
  return run


def test_t2t_defaults_and_flags_reach_training(captured):
  calls = captured()
  assert calls["worker_gpu"] == 1 and calls["tpu"] is None           # T2T: one device
  assert calls["train_steps"] == 250000 and calls["save_checkpoints_steps"] == 1000
  assert calls["eval_steps"] == 100 and calls["eval_split"] == "dev"
  assert calls["hparams"].xla_compile is False and calls["hparams"].seed == 1234
  assert calls["evaluate_fn"] == "bleu" and calls["bleu_split"] == "dev"
  assert (calls["bleu_decode_hparams"].beam_size, calls["bleu_decode_hparams"].extra_length) == (1, 100)
  assert calls["keep_checkpoint_max"] == 20 and calls["keep_checkpoint_every_n_hours"] == 10000
  assert calls["log_every"] == 100 and calls["save_checkpoints_secs"] == 0
  assert calls["eval_every"] is None and calls["max_train_seconds"] is None
  assert calls["overwrite"] is False and calls["data_dir"] == "t2t_data"
  # Each value given reaches the run: a flag parsed and then dropped (the run keeping
  # train_and_evaluate's own default, T2T's value too) passes every check of the defaults.
  calls = captured("--train_steps=12", "--eval_steps=3", "--keep_checkpoint_max=4", "--eval_every=6",
                   "--train_minutes=2", "--overwrite_output_dir", "--data_dir=d")
  assert (calls["train_steps"], calls["eval_steps"], calls["keep_checkpoint_max"]) == (12, 3, 4)
  assert calls["eval_every"] == 6 and calls["max_train_seconds"] == 120
  assert calls["overwrite"] is True and calls["data_dir"] == "d"
  calls = captured("--local_eval_frequency=7", "--random_seed=5", "--xla_compile",
                   "--eval_use_test_set=true", "--keep_checkpoint_every_n_hours=2",
                   "--save_checkpoints_secs=60", "--log_step_count_steps=3")
  assert calls["save_checkpoints_steps"] == 7 and calls["save_checkpoints_secs"] == 60
  assert calls["hparams"].seed == 5 and calls["hparams"].xla_compile is True
  assert calls["eval_split"] == "test" and calls["keep_checkpoint_every_n_hours"] == 2
  assert calls["log_every"] == 3 and calls["bleu_split"] == "test"
  assert captured("--decode_hparams=extra_length=50")["bleu_decode_hparams"].extra_length == 50
  assert "bleu_split" not in captured("--no_eval_bleu")
  calls = captured("--schedule=train", "--save_checkpoints_steps=3", "--local_eval_frequency=7",
                   "--noxla_compile")
  assert calls["eval_steps"] == 0 and calls["evaluate_fn"] is None
  assert calls["save_checkpoints_steps"] == 3 and calls["hparams"].xla_compile is False
  assert captured("--use_tpu", "--cloud_tpu_name=my-tpu")["tpu"] == "my-tpu"
  assert captured("--use_tpu", "--master=grpc://10.0.0.2:8470")["tpu"] == "grpc://10.0.0.2:8470"
  assert captured("--worker_gpu=0")["worker_gpu"] == 0


def test_eval_schedules_and_generate_data_reach_their_runs(captured, monkeypatch):
  """T2T's evaluator schedules, each as the evaluation is given it: continuous_eval follows new
  checkpoints up to --train_steps, waiting --eval_timeout_mins; evaluate runs once; the
  *_on_train_data ones read the training split, without dev BLEU, into eval_train; none trains.
  --generate_data writes the data into --data_dir before training. (Only --schedule=evaluate was
  run, by the walkthrough: continuous_eval mapped to a single evaluation, a timeout left at its
  default, or --generate_data dropped, passed every test.)"""
  from t2t_lite.data import token_shards
  from t2t_lite.training import evaluation
  runs = []
  monkeypatch.setattr(evaluation, "evaluate_checkpoints",
                      lambda problem, *args, **kwargs: runs.append((args, kwargs)))
  monkeypatch.setattr(token_shards, "generate_data", lambda problem, data_dir: runs.append(data_dir))
  for flags, split, evaluate_fn, continuous, summary in (
      (["--schedule=continuous_eval"], "dev", "bleu", True, "eval"),
      (["--schedule=evaluate", "--eval_use_test_set"], "test", "bleu", False, "eval"),
      (["--schedule=continuous_eval_on_train_data"], "train", None, True, "eval_train"),
      (["--schedule=evaluate_on_train_data"], "train", None, False, "eval_train")):
    calls = captured(*flags, "--train_steps=300", "--eval_timeout_mins=7", "--eval_steps=4")
    assert "train_steps" not in calls, flags     # no training
    args, kwargs = runs.pop()
    assert not runs and args == ("x", "t2t_data", 4), (flags, runs, args)
    assert kwargs == {"split": split, "evaluate_fn": evaluate_fn, "continuous": continuous,
                      "train_steps": 300, "timeout_minutes": 7, "summary_name": summary}, flags
  assert captured("--data_dir=d")["train_steps"] == 250000 and runs == []
  assert captured("--generate_data", "--data_dir=d")["train_steps"] == 250000 and runs == ["d"]


def test_several_workers_stop_early_on_dev_bleu_too(captured, monkeypatch):
  """Dev BLEU is decoded on the chief only, and the chief's decision to stop reaches every worker
  (train_loop, tests/test_data_parallel.py): a patience on it is taken with several workers."""
  monkeypatch.setattr(distribute, "make_strategy", lambda worker_gpu, tpu: mock.Mock(
      spec=tf.distribute.MultiWorkerMirroredStrategy))
  calls = captured("--eval_early_stopping_steps=4")
  assert calls["early_stopping"].patience == 4 and calls["early_stopping"].metric is None
  assert calls["evaluate_fn"] == "bleu"   # the default metric is then dev BLEU


def test_early_stopping_flags_reach_the_run(captured, capsys):
  """Each --eval_early_stopping_* flag reaches the EarlyStopping the run takes (only the
  patience was given before: a metric, minimize or delta dropped for its default passed), and
  an unknown metric is an `error:` naming it, exit status 2, before any training."""
  calls = captured("--eval_early_stopping_metric=nll", "--noeval_early_stopping_metric_minimize",
                   "--eval_early_stopping_metric_delta=0.5", "--eval_early_stopping_steps=4")
  stopping = calls["early_stopping"]
  assert stopping.metric == "nll" and stopping.minimize is False
  assert stopping.delta == 0.5 and stopping.patience == 4
  calls.clear()
  capsys.readouterr()
  try:
    status = trainer.main(["--problem=translate_ende_multi30k", "--raw_data_dir=x",
                           "--output_dir=x", "--eval_early_stopping_metric=bogus"])
  except SystemExit as e:
    status = e.code
  assert status == 2
  err = capsys.readouterr().err
  assert "error: " in err and "--eval_early_stopping_metric=bogus" in err, err
  assert "train_steps" not in calls   # nothing trained


def test_worker_flags_are_checked_against_tf_config(monkeypatch):
  trainer.check_workers(1, 0)
  monkeypatch.delenv("TF_CONFIG", raising=False)
  with pytest.raises(common.UsageError, match="TF_CONFIG names 0 workers"):
    trainer.check_workers(2, 1)
  cluster = {"worker": ["a:1", "b:1"]}
  monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}}))
  trainer.check_workers(2, 1)
  with pytest.raises(common.UsageError, match="TF_CONFIG's task is worker 1"):
    trainer.check_workers(2, 0)


def test_checkpoints_every_n_seconds(tmp_path, monkeypatch, capsys):
  """--save_checkpoints_secs: checkpoints (and evaluations) follow the clock, not the step
  count. A fake clock stands still except that every update takes exactly 1 s, so with a 2 s
  interval the checkpoints are exactly steps 2, 4 and 6 (not every update, not only the last).
  keep_checkpoint_every_n_hours keeps them (keep_checkpoint_max alone prunes them:
  tests/test_trainer.py). (The copy task and a one-layer d32 model: the clock is what is
  checked.)"""
  from t2t_lite.hparams import get_hparams
  from t2t_lite.problems import get_problem
  now = [0.0]
  real_step = train_loop.Trainer.train_step

  def one_second_update(self, batch):
    result = real_step(self, batch)
    now[0] += 1.0
    return result

  monkeypatch.setattr(train_loop.Trainer, "train_step", one_second_update)
  monkeypatch.setattr(train_loop, "time", types.SimpleNamespace(time=lambda: now[0]))
  out = tmp_path / "model"
  hparams = get_hparams("transformer_tiny", "hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1,"
                        "batch_size=256,max_length=16,eval_bleu_examples=0")
  assert hparams.gradient_accumulation_steps == 1   # one train_step per update
  train_loop.train_and_evaluate(
      get_problem("algorithmic_copy"), hparams, str(out), str(tmp_path / "data"), train_steps=6,
      eval_steps=1, save_checkpoints_steps=1000, keep_checkpoint_max=1, log_every=1000,
      save_checkpoints_secs=2, keep_checkpoint_every_n_hours=1e-9)
  assert now[0] == 6.0
  steps = sorted(int(name[5:-6]) for name in os.listdir(out) if name.endswith(".index"))
  assert steps == [2, 4, 6]                           # kept despite keep_checkpoint_max=1
  printed = capsys.readouterr().out
  assert [int(line.split()[3].rstrip(":")) for line in printed.split("\n")
          if line.startswith("eval at step")] == steps


def test_t2t_walkthrough_then_evaluate(tiny_model_dir, multi30k_slice, tmp_path, capsys, monkeypatch):
  """T2T's README walkthrough with only the command names changed (plus --raw_data_dir and a
  short run), then --schedule=evaluate on the test split. Datagen's shards hold every pair of the
  raw files, and the trainer reads them (it would tokenize the text itself without them, so a
  datagen writing nothing, or a trainer passing them by, ran the walkthrough as well)."""
  from t2t_lite.data import token_shards
  reads, real_read = [], token_shards.read_token_shards

  def read_token_shards(problem_name, split, *args, **kwargs):
    chunks = real_read(problem_name, split, *args, **kwargs)
    reads.append((split, chunks is not None))
    return chunks

  monkeypatch.setattr(token_shards, "read_token_shards", read_token_shards)
  data_dir = tmp_path / "t2t_data"
  train_dir = tmp_path / "t2t_train"
  data_dir.mkdir()
  for name in os.listdir(tiny_model_dir[1]):  # the slice's vocabulary, built once per session
    if name.startswith("vocab."):
      shutil.copy(tiny_model_dir[1] / name, data_dir / name)
  problem = ["--problem=translate_ende_multi30k", f"--raw_data_dir={multi30k_slice}"]
  assert datagen.main([f"--data_dir={data_dir}", "--tmp_dir=/tmp/t2t_datagen", *problem]) == 0
  manifest = token_shards.read_manifest(str(data_dir), "translate_ende_multi30k")
  assert manifest, "datagen wrote no manifest"
  raw_lines = {split: len((multi30k_slice / f"{name}.en").read_text(encoding="utf-8").splitlines())
               for split, name in (("train", "train"), ("dev", "val"), ("test", "test_2016_flickr"))}
  assert {split: entry["pairs"] for split, entry in manifest["splits"].items()} == raw_lines
  common_flags = [f"--data_dir={data_dir}", *problem, *T2T_TINY, f"--output_dir={train_dir}"]
  assert trainer.main([*common_flags, "--train_steps=10", "--local_eval_frequency=5",
                       "--eval_steps=1"]) == 0
  printed = capsys.readouterr().out
  assert "eval at step 5" in printed and "eval at step 10" in printed
  assert set(reads) == {("train", True), ("dev", True)}, reads   # datagen's shards, both splits
  decode_file = data_dir / "decode_this.txt"
  decode_file.write_text("Hello world\nGoodbye world\n", encoding="utf-8")
  reference = tmp_path / "ref-translation.de"
  reference.write_text("Hallo Welt\nAuf Wiedersehen Welt\n", encoding="utf-8")
  translation = tmp_path / "translation.en"
  assert decoder.main([f"--data_dir={data_dir}", "--problem=translate_ende_multi30k",
                       "--model=transformer", "--hparams_set=transformer_tiny",
                       f"--output_dir={train_dir}", "--decode_hparams=beam_size=4,alpha=0.6",
                       f"--decode_from_file={decode_file}", f"--decode_to_file={translation}"]) == 0
  assert len(translation.read_text(encoding="utf-8").split("\n")) == 3
  assert bleu.main([f"--translation={translation}", f"--reference={reference}"]) == 0
  printed = capsys.readouterr().out
  assert "BLEU_uncased = " in printed and "BLEU_cased = " in printed

  reads.clear()
  assert trainer.main([*common_flags, "--schedule=evaluate", "--eval_use_test_set",
                       "--eval_steps=1"]) == 0
  assert "eval of ckpt-10 on test: loss" in capsys.readouterr().out
  # In the model directory the run reads the problem through its saved vocabulary
  # (problems.base.VocabProblem): the same vocabulary and raw files, so datagen's test shards.
  assert set(reads) == {("test", True)}, reads
  assert os.listdir(train_dir / "eval")


def test_continuous_eval_follows_new_checkpoints(tiny_model_dir, multi30k_slice, tmp_path, capsys,
                                                monkeypatch):
  """--schedule=continuous_eval (T2T's evaluator job): evaluates the newest checkpoint, waits for
  the next one a training job writes, and stops at --train_steps. A thread stands in for the
  training job: once the first evaluation is written (an event, not a delay), it writes
  checkpoint 1000 (a copy of the newest)."""
  import threading
  from t2t_lite.problems import get_problem
  from t2t_lite.training import evaluation
  model_dir = tmp_path / "model"
  shutil.copytree(tiny_model_dir[0], model_dir)
  latest = tf.train.latest_checkpoint(str(model_dir))
  evaluated, finished = threading.Event(), threading.Event()
  real_write = evaluation.write_scalars

  def write_scalars(*args, **kwargs):
    real_write(*args, **kwargs)
    evaluated.set()

  monkeypatch.setattr(evaluation, "write_scalars", write_scalars)
  # The eval step is traced once for both checkpoints and all their batch shapes.
  traces, shapes, real_loss, real_evaluate = [], set(), evaluation.fast_smoothed_cross_entropy, \
      evaluation.evaluate
  monkeypatch.setattr(evaluation, "fast_smoothed_cross_entropy",
                      lambda *args: traces.append(1) or real_loss(*args))

  def evaluate(step_fn, dataset, max_batches=None):
    shapes.update(tuple(batch["targets"].shape) for batch in dataset.take(max_batches))
    return real_evaluate(step_fn, dataset, max_batches)

  monkeypatch.setattr(evaluation, "evaluate", evaluate)

  def write_next_checkpoint():
    while not (evaluated.wait(1) or finished.is_set()):
      pass
    if finished.is_set():   # the evaluator stopped before its first evaluation: the test fails
      return
    for name in os.listdir(model_dir):
      if name.startswith(os.path.basename(latest) + "."):
        shutil.copy(model_dir / name, model_dir / name.replace(os.path.basename(latest), "ckpt-1000"))
    tf.compat.v1.train.update_checkpoint_state(str(model_dir), str(model_dir / "ckpt-1000"))

  writer = threading.Thread(target=write_next_checkpoint)
  writer.start()
  try:
    # The timeout only ends a run whose checkpoint never comes (a broken test), never a slow one.
    results = evaluation.evaluate_checkpoints(
        get_problem("translate_ende_multi30k", raw_data_dir=str(multi30k_slice)), str(model_dir),
        str(tiny_model_dir[1]), eval_steps=3, continuous=True, train_steps=1000, timeout_minutes=60)
  finally:
    finished.set()
    writer.join()
  printed = capsys.readouterr().out
  assert f"eval of {os.path.basename(latest)} on dev" in printed
  assert "eval of ckpt-1000 on dev" in printed and results["step"] == 1000
  assert len(shapes) > 1 and len(traces) == 1, (shapes, traces)
