"""Keep the best checkpoint and stop early (T2T's --eval_early_stopping_*).

The metric is scripted (an `evaluate_fn` returning given values at given steps), so which
evaluation is the best and when the patience runs out are known exactly; the reference for
best/ is the model's weights captured at that evaluation. The kill test is event-driven: it
kills the trainer with SIGKILL as soon as it prints an evaluation (just before best/ is written),
never after a wall-clock delay.
"""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import model_dir
from t2t_lite.hparams import get_hparams
from t2t_lite.problems import get_problem
from t2t_lite.training import average, best, train_loop

MICRO = ("hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1,batch_size=256,"
         "max_length=16,eval_bleu_examples=0,learning_rate_warmup_steps=20")
SCORES = {2: 1.0, 4: 3.0, 6: 2.0, 8: 3.0, 10: 9.0}  # the best is step 4's: 8 only equals it


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
  """A run evaluating every 2 updates with a scripted score, patience 4, delta 0."""
  out = tmp_path_factory.mktemp("early") / "model"
  weights = {}

  def evaluate_fn(model):
    step = int(trainer_step[0]())
    weights[step] = {n: v.numpy() for n, v in model_dir.checkpointable(model).items()}
    return {"score": SCORES[step]}

  trainer_step = []
  real_trainer = train_loop.Trainer

  class Recording(real_trainer):  # lets evaluate_fn see the step it evaluates
    def __init__(self, *args, **kwargs):
      super().__init__(*args, **kwargs)
      trainer_step.append(lambda: self.step)

  train_loop.Trainer = Recording
  try:
    results = train_loop.train_and_evaluate(
        get_problem("algorithmic_copy"), get_hparams("transformer_tiny", MICRO), str(out), None,
        train_steps=10, eval_steps=1, save_checkpoints_steps=2, log_every=2, evaluate_fn=evaluate_fn,
        early_stopping=best.EarlyStopping(metric="score", minimize=False, patience=4, delta=0.0))
  finally:
    train_loop.Trainer = real_trainer
  return out, results, weights


def test_early_stopping_stops_after_the_patience_with_the_best_evaluations_weights(stopped):
  out, results, weights = stopped
  assert results["stopped_early"] == 8 and results["step"] == 8
  assert results["best_step"] == 4 and results["best_score"] == 3.0
  assert tf.train.latest_checkpoint(str(out)).endswith("ckpt-8")
  record = best.read_best(str(out))
  assert record["step"] == 4 and record["metric"] == "score" and record["value"] == 3.0
  assert not record["minimize"]
  _, model, path = model_dir.restore_model(str(out / "best"))  # a model directory of its own
  assert path.endswith("ckpt-4")
  for name, value in model_dir.checkpointable(model).items():
    np.testing.assert_array_equal(value.numpy(), weights[4][name], err_msg=name)
  assert not np.array_equal(weights[4]["shared_embedding/embeddings"],
                            weights[8]["shared_embedding/embeddings"])  # not just any step's
  leftovers = [n for n in os.listdir(out) if n.startswith((".tmp-best", ".best-"))]
  assert leftovers == [".best-4"]


def test_averaging_can_end_at_the_best(stopped):
  out, _, _ = stopped
  window = average.window_ending_at_best(str(out), 2)
  assert [os.path.basename(p) for p in window] == ["ckpt-2", "ckpt-4"]
  assert window[-1].startswith(str(out / "best"))


def test_metric_defaults_and_directions():
  assert best.EarlyStopping().resolve({"loss": 1.0}) == ("loss", True)
  assert best.EarlyStopping().resolve({"loss": 1.0, "bleu": 2.0}) == ("bleu", False)
  assert best.EarlyStopping("perplexity", False).resolve({"perplexity": 3.0}) == ("perplexity", False)
  with pytest.raises(ValueError, match="the evaluations compute loss"):
    best.EarlyStopping("bleu").resolve({"loss": 1.0})


KILLED_RUN = """
import sys, time
from t2t_lite.hparams import get_hparams
from t2t_lite.problems import get_problem
from t2t_lite.training import best, train_loop

def run(out, steps, hparams):
  train_loop.train_and_evaluate(
      get_problem("algorithmic_copy"), get_hparams("transformer_tiny", hparams), out, None,
      train_steps=steps, eval_steps=1, save_checkpoints_steps=1, log_every=100,
      evaluate_fn=lambda model: {"score": float(time.time_ns())},  # each evaluation is a new best
      early_stopping=best.EarlyStopping("score", minimize=False, delta=0.0))

if __name__ == "__main__":
  run(sys.argv[1], int(sys.argv[2]), sys.argv[3])
"""


def test_a_kill_during_training_never_loses_best(tmp_path):
  """SIGKILL as soon as an evaluation is printed (its best/ is being written then), then checks
  that best/ is a complete model directory of a step the trainer reported; a rerun (in this
  process) finishes."""
  out, script = tmp_path / "model", tmp_path / "run.py"
  script.write_text(KILLED_RUN, encoding="utf-8")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  kept, evaluated = [], None
  with subprocess.Popen([sys.executable, str(script), str(out), "40", MICRO], stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True, env=env) as process:
    for line in process.stdout:
      if line.startswith("best "):
        kept.append(int(line.split(" at step ")[1].split(":")[0]))
      if line.startswith("eval at step"):
        evaluated = int(line.split()[3].rstrip(":"))
        if len(kept) >= 2:  # best/ exists; the newest evaluation's is being written now
          process.send_signal(signal.SIGKILL)
          break
    process.wait()
  assert process.returncode == -signal.SIGKILL, "the trainer ended before it was killed"
  record = best.read_best(str(out))
  assert record is not None and record["step"] in kept + [evaluated]
  _, _, path = model_dir.restore_model(str(out / "best"))
  assert path == record["checkpoint"]
  with open(out / "best" / model_dir.HPARAMS_FILE, encoding="utf-8") as f:
    assert json.load(f)["problem"] == "algorithmic_copy"
  rerun = {"__name__": "rerun"}  # the same run, resumed in this process (no kill to come)
  exec(KILLED_RUN, rerun)  # pylint: disable=exec-used
  rerun["run"](str(out), evaluated + 2, MICRO)
  assert best.read_best(str(out))["step"] == evaluated + 2
  leftovers = [n for n in os.listdir(out) if n.startswith((".tmp-best", ".best-"))]
  assert leftovers == [f".best-{evaluated + 2}"]


def test_best_links_the_checkpoint_the_trainer_just_saved(stopped):
  """Evaluations at checkpoint steps: best/ shares the regular checkpoint's files (no second
  write); the trainer's own index is untouched by it."""
  out, _, _ = stopped
  for suffix in (".index", ".data-00000-of-00001"):
    assert os.path.samefile(out / "best" / f"ckpt-4{suffix}", out / f"ckpt-4{suffix}"), suffix
  assert tf.train.latest_checkpoint(str(out / "best")) == str(out / "best" / "ckpt-4")


def test_write_best_links_a_saved_checkpoint_and_saves_one_otherwise(tmp_path):
  variable = tf.Variable([1.0, 2.0])
  checkpoint = tf.train.Checkpoint(model={"v": variable})
  saved = tf.train.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=1).save(checkpoint_number=3)
  record = {"metric": "loss", "value": 1.0}
  path = best.write_best(str(tmp_path), checkpoint, 3, record, saved=saved)
  assert os.path.samefile(path + ".index", saved + ".index")
  assert tf.train.latest_checkpoint(str(tmp_path / "best")) == path
  assert best.read_best(str(tmp_path))["checkpoint"] == path
  for name in os.listdir(tmp_path):  # the rolling window deletes the regular checkpoint: best/ keeps it
    if name.startswith("ckpt-3."):
      os.remove(tmp_path / name)
  key = "model/v/.ATTRIBUTES/VARIABLE_VALUE"
  np.testing.assert_array_equal(tf.train.load_checkpoint(path).get_tensor(key), [1.0, 2.0])
  variable.assign([5.0, 6.0])  # no checkpoint of step 5 on disk: best/ saves the state itself
  path = best.write_best(str(tmp_path), checkpoint, 5, record)
  np.testing.assert_array_equal(tf.train.load_checkpoint(path).get_tensor(key), [5.0, 6.0])
  assert best.read_best(str(tmp_path))["step"] == 5
  assert [n for n in os.listdir(tmp_path) if n.startswith((".tmp-best", ".best-"))] == [".best-5"]


def test_a_nan_evaluation_is_never_the_best(tmp_path):
  keeper = best.BestKeeper(str(tmp_path), best.EarlyStopping("loss", patience=4, delta=0.0), write=False)
  assert not keeper.update(2, {"loss": float("nan")}, None)
  assert keeper.best is None and not keeper.should_stop(10)
  assert keeper.update(4, {"loss": 2.0}, None) and keeper.best["step"] == 4
  assert not keeper.update(6, {"loss": float("inf")}, None) and keeper.best["step"] == 4
  keeper.best = dict(keeper.best, value=float("nan"))  # a NaN an older run kept does not block
  assert keeper.update(8, {"loss": 3.0}, None) and keeper.best["value"] == 3.0


def test_a_loss_is_best_when_lowest_and_restarts_the_patience_by_falling_over_delta(tmp_path):
  """The default metric (the loss, with no BLEU) is minimized: the other tests score larger is
  better, where a keeper that ignored `minimize` passes. Defaults: the patience counts from the last
  evaluation that fell by more than delta 0.1 below the one before it that did (2.88 at step 8:
  0.12 below 3.0, though only 0.07 below the best, 2.95)."""
  keeper = best.BestKeeper(str(tmp_path), best.EarlyStopping(patience=4), write=False)
  for step, loss, is_best, patience_from in ((2, 3.0, True, 2), (4, 3.5, False, 2),
                                             (6, 2.95, True, 2), (8, 2.88, True, 8),
                                             (10, 2.88, False, 8), (12, 4.0, False, 8)):
    assert keeper.update(step, {"loss": loss, "nll": 1.0}, None) == is_best, step
    assert keeper.patience_from["step"] == patience_from, step
  assert keeper.best["step"] == 8 and keeper.best["value"] == 2.88 and keeper.best["minimize"]
  assert not keeper.should_stop(11) and keeper.should_stop(12)


def test_rerunning_a_run_that_stopped_early_trains_no_further(stopped):
  out, _, _ = stopped
  results = train_loop.train_and_evaluate(
      get_problem("algorithmic_copy"), get_hparams("transformer_tiny", MICRO), str(out), None,
      train_steps=10, eval_steps=1, save_checkpoints_steps=2, log_every=2,
      evaluate_fn=lambda model: {"score": 100.0},  # would be a new best, were it evaluated
      early_stopping=best.EarlyStopping(metric="score", minimize=False, patience=4, delta=0.0))
  assert results["step"] == 8 and results["stopped_early"] == 8 and results["best_step"] == 4
  assert tf.train.latest_checkpoint(str(out)).endswith("ckpt-8")
  assert best.read_best(str(out))["step"] == 4


def test_an_early_stop_between_saves_saves_and_logs_its_checkpoint(tmp_path, capsys):
  """Evaluations every 3 updates, checkpoints every 100: the patience of 6 runs out at the
  evaluation of update 9, between saves, so the stop saves ckpt-9 and logs it as every save is
  logged (it once saved without a word)."""
  out = tmp_path / "model"
  scores = iter([1.0, 0.5, 0.5])
  results = train_loop.train_and_evaluate(
      get_problem("algorithmic_copy"), get_hparams("transformer_tiny", MICRO), str(out), None,
      train_steps=30, eval_steps=1, save_checkpoints_steps=100, eval_every=3, log_every=3,
      evaluate_fn=lambda model: {"score": next(scores)},
      early_stopping=best.EarlyStopping(metric="score", minimize=False, patience=6, delta=0.0))
  log = capsys.readouterr().out
  assert results["stopped_early"] == 9 and results["step"] == 9, log
  assert tf.train.latest_checkpoint(str(out)).endswith("ckpt-9")
  assert log.index("early stopping at step 9") < log.index(f"saved {out / 'ckpt-9'}"), log


@pytest.mark.parametrize("relative", [False, True])
def test_best_checkpoint_state_is_tensorflows_and_relative(tmp_path, monkeypatch, relative):
  """best/'s `checkpoint` file (linked or saved) is read by TensorFlow after the swap, and names
  the checkpoint relative to best/: the temporary directory it was written in was renamed, and
  the model directory itself may move."""
  monkeypatch.chdir(tmp_path)
  out = "model" if relative else str(tmp_path / "model")
  os.makedirs(out)
  variable = tf.Variable([1.0, 2.0])
  checkpoint = tf.train.Checkpoint(model={"v": variable})
  manager = tf.train.CheckpointManager(checkpoint, out, max_to_keep=1)
  for step, saved in ((3, None), (4, manager.save(checkpoint_number=4))):  # saved here, then linked
    path = best.write_best(out, checkpoint, step, {"metric": "loss", "value": 1.0}, saved=saved)
    state = tf.train.get_checkpoint_state(os.path.join(out, "best"))
    assert state.model_checkpoint_path == os.path.join(out, "best", f"ckpt-{step}") == path
    assert list(state.all_model_checkpoint_paths) == [path]
    assert tf.train.latest_checkpoint(os.path.join(out, "best")) == path
  os.rename(tmp_path / "model", tmp_path / "moved")
  moved = tmp_path / "moved" / "best"
  assert tf.train.latest_checkpoint(str(moved)) == str(moved / "ckpt-4")
  np.testing.assert_array_equal(tf.train.load_checkpoint(str(moved / "ckpt-4")).get_tensor(
      "model/v/.ATTRIBUTES/VARIABLE_VALUE"), [1.0, 2.0])


def test_best_takes_any_improvement_the_patience_only_those_over_delta(tmp_path):
  """delta 0.5, patience 6, larger is better: 1.3 and 1.4 become best/ without restarting the
  patience counted from 1.0 at step 2, so it runs out at step 8; a keeper resumed from best.json
  counts from the same step, and 1.6 (+0.6 over 1.0) restarts it."""
  variable = tf.Variable([0.0])
  checkpoint = tf.train.Checkpoint(model={"v": variable})
  settings = best.EarlyStopping("score", False, patience=6, delta=0.5)
  keeper = best.BestKeeper(str(tmp_path), settings)
  for step, score, is_best in ((2, 1.0, True), (4, 1.3, True), (6, 1.2, False), (8, 1.4, True)):
    variable.assign([score])
    assert keeper.update(step, {"score": score}, checkpoint) == is_best, step
    assert keeper.patience_from["step"] == 2 and keeper.should_stop(step) == (step == 8), step
  assert keeper.best["step"] == best.read_best(str(tmp_path))["step"] == 8
  resumed = best.BestKeeper(str(tmp_path), settings)
  assert resumed.patience_from == {"step": 2, "value": 1.0} and resumed.should_stop(8)
  variable.assign([1.6])
  assert resumed.update(10, {"score": 1.6}, checkpoint) and resumed.patience_from["step"] == 10
  assert not resumed.should_stop(15) and resumed.should_stop(16)
  np.testing.assert_array_equal(tf.train.load_checkpoint(best.read_best(str(tmp_path))["checkpoint"])
                                .get_tensor("model/v/.ATTRIBUTES/VARIABLE_VALUE"), np.float32([1.6]))
