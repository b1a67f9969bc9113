"""The trainer: resuming after SIGKILL, averaging, refusing bad input (what training reaches:
tests/test_training_outcomes.py; several devices and workers against one device:
tests/test_data_parallel.py; the trainer command on two worker processes:
tests/test_end_to_end.py::test_wmt14_multiworker_recipe_runs_in_dry_run)."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import model_dir
from t2t_lite.bin import trainer
from t2t_lite.hparams import get_hparams
from t2t_lite.problems import get_problem
from t2t_lite.training import average, evaluation, train_loop

TINY = "transformer_tiny"
# A very small model for the plumbing tests; the learning test uses the real tiny set.
MICRO = ("hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1,batch_size=256,"
         "max_length=16,eval_bleu_examples=0")


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory):
  """The model directory of the copy task trained 6 updates, a checkpoint every 2."""
  root = tmp_path_factory.mktemp("copy_run")
  out = str(root / "run")
  train_loop.train_and_evaluate(get_problem("algorithmic_copy"), get_hparams(TINY, MICRO), out,
                                str(root / "data"), train_steps=6, eval_steps=0, save_checkpoints_steps=2)
  return out


def test_a_run_traces_its_step_once_for_every_batch_shape(tmp_path, monkeypatch):
  """train_and_evaluate gives the trainer the pipeline's element_spec: the copy task's length
  buckets make batches of several shapes, yet each step kind is traced once (without the spec,
  once for the first shape and again, relaxed, for the next)."""
  trainers, shapes = [], set()

  class Recorded(train_loop.Trainer):
    def __init__(self, *args, **kwargs):
      super().__init__(*args, **kwargs)
      trainers.append(self)

    def train_step(self, dist_batch):
      shapes.add(tuple(dist_batch["targets"].shape))
      return super().train_step(dist_batch)

  monkeypatch.setattr(train_loop, "Trainer", Recorded)
  train_loop.train_and_evaluate(get_problem("algorithmic_copy"),
                                get_hparams(TINY, MICRO + ",gradient_accumulation_steps=2"),
                                str(tmp_path / "run"), str(tmp_path / "data"), train_steps=4,
                                eval_steps=0, save_checkpoints_steps=4)
  assert len(shapes) > 2, shapes
  step_fns = trainers[0]._step_fns  # pylint: disable=protected-access
  assert sorted(step_fns) == ["accumulate", "update"]
  assert [step_fns[kind].experimental_get_tracing_count() for kind in sorted(step_fns)] == [1, 1]


def test_checkpoint_restores_every_model_variable(copy_run):
  """Every variable of the restored model holds exactly the checkpoint's value, read under the key
  TensorFlow's object graph gives its Keras path ("model/", then the path less the model's name
  with "." written ".." and "/" written ".S"): none left as built, none missing."""
  out = copy_run
  _, restored, path = model_dir.restore_model(out)
  assert path.endswith("ckpt-6")
  reader = tf.train.load_checkpoint(path)
  names = reader.get_variable_to_shape_map()
  assert not any(n.startswith(model_dir.EMA_ROOT + "/") for n in names)  # the weights, no averages

  def key(variable):
    name = variable.path.split("/", 1)[1]   # less the model's own name (transformer_1)
    return "model/" + name.replace(".", "..").replace("/", ".S") + "/.ATTRIBUTES/VARIABLE_VALUE"

  assert sorted(key(v) for v in restored.weights) == sorted(n for n in names if n.startswith("model/"))
  for variable in restored.weights:
    np.testing.assert_array_equal(variable.numpy(), reader.get_tensor(key(variable)), err_msg=key(variable))
  # Training moved every variable away from how a model is built (LayerNorm's ones and the
  # biases' zeros included), so one the restore skipped, left as built, would differ above.
  fresh = model_dir.build_model(get_hparams(TINY, MICRO),
                                get_problem("algorithmic_copy").get_vocab(None).vocab_size)
  assert len(fresh.weights) == len(restored.weights)
  assert not [key(v) for v in fresh.weights if np.array_equal(v.numpy(), reader.get_tensor(key(v)))]


def test_hparams_json_records_overrides_and_refuses_other_hparams(tmp_path):
  problem = get_problem("algorithmic_copy")
  out, data = str(tmp_path / "run"), str(tmp_path / "data")
  hparams = get_hparams(TINY, MICRO)
  train_loop.train_and_evaluate(problem, hparams, out, data, train_steps=2, eval_steps=1,
                             save_checkpoints_steps=2, flags={"problem": "algorithmic_copy"})
  assert model_dir.read_model_dir(out) == ("algorithmic_copy", hparams)
  with pytest.raises(model_dir.ModelDirError, match="other settings.*hidden_size"):
    train_loop.train_and_evaluate(problem, hparams.replace(hidden_size=64), out, data, train_steps=4)
  # Asking to overwrite starts over: the new settings recorded, no checkpoint restored (step 0; the
  # old one would not fit them). No update needed to show it (one cost a pipeline and a trace).
  assert train_loop.train_and_evaluate(problem, hparams.replace(hidden_size=64), out, data,
                                       train_steps=0, eval_steps=0, overwrite=True) == {"step": 0}
  assert model_dir.read_model_dir(out)[1].hidden_size == 64


def test_checkpoint_averaging_is_the_elementwise_mean(copy_run, tmp_path):
  out = copy_run
  paths = average.last_checkpoints(out, 3)
  assert [p.rsplit("-", 1)[1] for p in paths] == ["2", "4", "6"]
  prefix = average.average_checkpoints(out, str(tmp_path / "avg"), 3)
  readers = [tf.train.load_checkpoint(p) for p in paths]
  averaged = tf.train.load_checkpoint(prefix)
  names = [n for n in averaged.get_variable_to_shape_map() if n.startswith("model/")
           and n.endswith("VARIABLE_VALUE")]
  assert len(names) > 10
  for name in names:
    expected = np.mean([r.get_tensor(name) for r in readers], axis=0)
    np.testing.assert_allclose(averaged.get_tensor(name), expected, rtol=1e-6, atol=1e-7)
  assert not np.allclose(readers[0].get_tensor(names[0]), readers[2].get_tensor(names[0]))
  # The averaged directory is a model directory the decoder can use.
  assert tf.train.latest_checkpoint(str(tmp_path / "avg")) == prefix
  model_dir.restore_model(str(tmp_path / "avg"))


@pytest.fixture(scope="module")
def ema_run(tmp_path_factory):
  """The copy task trained 3 updates with weight_ema_decay, a checkpoint at each, keeping 2 (and
  no keep_checkpoint_every_n_hours, which would keep them all)."""
  root = tmp_path_factory.mktemp("ema_run")
  out = str(root / "run")
  hparams = get_hparams(TINY, MICRO + ",learning_rate_warmup_steps=4,weight_ema_decay=0.7")
  train_loop.train_and_evaluate(get_problem("algorithmic_copy"), hparams, out, str(root / "data"),
                                train_steps=3, eval_steps=0, save_checkpoints_steps=1,
                                keep_checkpoint_max=2)
  return out


def test_keep_checkpoint_max_removes_the_older_checkpoints(ema_run):
  """keep_checkpoint_max=2: of checkpoints 1, 2 and 3 only the last two remain, on disk and in
  the `checkpoint` state file (tests/test_t2t_trainer.py keeps them by the hour)."""
  state = tf.train.get_checkpoint_state(ema_run)
  assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == ["ckpt-2", "ckpt-3"]
  assert {n.split(".")[0] for n in os.listdir(ema_run) if n.startswith("ckpt-")} == {"ckpt-2", "ckpt-3"}
  assert sorted(n for n in os.listdir(ema_run) if n.endswith(".index")) == ["ckpt-2.index", "ckpt-3.index"]


def test_averaging_checkpoints_with_moving_averages_takes_the_averages(ema_run, tmp_path):
  """Checkpoints trained with weight_ema_decay contribute their moving averages (`ema/...`, what
  they decode with), not the weights (`model/...`): each averaged variable is the mean of the
  checkpoints' averages, and differs from the mean of their weights."""
  paths = average.last_checkpoints(ema_run, 2)
  prefix = average.average_checkpoints(ema_run, str(tmp_path / "avg"), 2)
  readers = [tf.train.load_checkpoint(p) for p in paths]
  averaged = tf.train.load_checkpoint(prefix)
  names = [n[len(model_dir.EMA_ROOT) + 1:] for n, _ in tf.train.list_variables(paths[-1])
           if n.startswith(model_dir.EMA_ROOT + "/") and n.endswith("VARIABLE_VALUE")]
  assert len(names) > 10
  for name in names:
    emas = np.mean([r.get_tensor(f"{model_dir.EMA_ROOT}/{name}") for r in readers], axis=0)
    weights = np.mean([r.get_tensor(f"model/{name}") for r in readers], axis=0)
    np.testing.assert_allclose(averaged.get_tensor(f"model/{name}"), emas, rtol=1e-6, atol=1e-7,
                               err_msg=name)
    assert not np.allclose(emas, weights, rtol=1e-6, atol=1e-7), name


def test_tpu_needs_xla_compile_and_static_shapes():
  from t2t_lite.training import distribute  # pylint: disable=import-outside-toplevel
  tpu = object.__new__(tf.distribute.TPUStrategy)  # only its type is looked at
  with pytest.raises(ValueError, match="xla_compile=true,static_batch_shapes=true"):
    distribute.check_supported(tpu, get_hparams(TINY, "xla_compile=true"))
  distribute.check_supported(tpu, get_hparams(TINY, "xla_compile=true,static_batch_shapes=true"))
  distribute.check_supported(tf.distribute.get_strategy(), get_hparams(TINY))


def test_nonfinite_loss_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
  problem = get_problem("algorithmic_copy")
  out, data = str(tmp_path / "run"), str(tmp_path / "data")
  calls = tf.Variable(0)
  real_loss = train_loop.projected_cross_entropy

  def loss_that_turns_nan_at_step_5(*args, **kwargs):
    loss_sum, count, nll = real_loss(*args, **kwargs)
    calls.assign_add(1)
    return tf.where(calls >= 5, tf.constant(float("nan")), loss_sum), count, nll

  monkeypatch.setattr(train_loop, "projected_cross_entropy", loss_that_turns_nan_at_step_5)
  with pytest.raises(train_loop.NonFiniteLossError, match="NaN or infinite") as error:
    train_loop.train_and_evaluate(problem, get_hparams(TINY, MICRO), out, data, train_steps=20,
                               eval_steps=0, save_checkpoints_steps=2, log_every=10)
  assert "ckpt-4" in str(error.value)
  assert tf.train.latest_checkpoint(out).endswith("ckpt-4")  # nothing saved after the NaN
  _, model, _ = model_dir.restore_model(out)
  assert all(np.isfinite(w).all() for w in model.get_weights())


@pytest.mark.parametrize("late", ["save", "evaluation", "final save"])
def test_a_budget_spent_in_a_save_or_an_evaluation_ends_the_run_there(late, tmp_path, train_clock,
                                                                       monkeypatch, capsys):
  """A time budget that runs out while a checkpoint is saved or the model evaluated ends the run
  at that update, with its checkpoint and one evaluation, and not one update later: there the
  last checkpoint would be one update after the one before it, and an average of the last N
  checkpoints would hold two nearly equal ones (the quickstart's ckpt-1800 and ckpt-1801). On the
  fake clock each update takes 0.25 s; the save (a checkpoint every 5 updates, evaluations every
  20) or the evaluation (every 4 updates, checkpoints every 20) takes 1 s, from 1.25 s or 1.0 s
  into a budget of 1.5 s or 1.2 s. A slow save at the run's last update (`train_steps`) ends it
  as any run ends there, with no word of the budget."""
  train_steps = 5 if late == "final save" else 100
  if late in ("save", "final save"):
    real_save = train_loop.Trainer.save

    def slow_save(self, *args, **kwargs):
      train_clock[0] += 1.0
      return real_save(self, *args, **kwargs)

    monkeypatch.setattr(train_loop.Trainer, "save", slow_save)
    every, budget, stop = {"save_checkpoints_steps": 5, "eval_every": 20}, 1.5, 5
  else:
    every, budget, stop = {"save_checkpoints_steps": 20, "eval_every": 4}, 1.2, 4

  def evaluated(model):
    del model
    if late == "evaluation":
      train_clock[0] += 1.0
    return {"made_up": 1.0}

  out = tmp_path / "run"
  results = train_loop.train_and_evaluate(
      get_problem("algorithmic_copy"), get_hparams(TINY, MICRO), str(out), str(tmp_path / "data"),
      train_steps=train_steps, eval_steps=1, log_every=100, progress=False, max_train_seconds=budget,
      evaluate_fn=evaluated, **every)
  log = capsys.readouterr().out
  assert results["step"] == stop, log
  assert np.isfinite(results["train_loss"]), log  # the last update's (no log line at 4 or 5)
  assert _checkpoint_step(out) == stop and len(list(out.glob("ckpt-*.index"))) == 1, log
  assert re.findall(r"eval at step (\d+)", log) == [str(stop)], log
  if late == "final save":
    assert "time budget" not in log, log
    return
  assert f"time budget of {budget:.0f}s used at step {stop} (during its {late}); stopping" in log
  assert f"step {stop + 1}:" not in log


def test_evaluation_traces_once_for_every_batch_shape_and_never_again(tmp_path, monkeypatch):
  """The trainer's eval function is built once for the dev dataset's element_spec: one trace
  for batches of several shapes (without the spec, one for the first shape and another, relaxed,
  for the next), a later evaluation traces nothing (each trace runs the loss in Python once), and
  a dataset of another spec is traced for its own."""
  traces = []
  real_loss = evaluation.fast_smoothed_cross_entropy
  monkeypatch.setattr(evaluation, "fast_smoothed_cross_entropy",
                      lambda *args: traces.append(1) or real_loss(*args))
  problem, hparams = get_problem("algorithmic_copy"), get_hparams(TINY, MICRO)
  trainer = train_loop.Trainer(hparams, problem.get_vocab(None).vocab_size, str(tmp_path))
  dev = lambda: problem.dataset("dev", None, hparams, training=False)  # noqa: E731
  shapes = {tuple(batch["targets"].shape) for batch in dev().take(3)}
  assert len(shapes) > 1, shapes  # batches of several shapes
  first = trainer.evaluate(dev(), 3)
  assert len(traces) == 1
  assert trainer.evaluate(dev(), 3) == first and len(traces) == 1
  # A dataset of another spec (one batch, its shape static) gets a function of its own, once.
  one_batch = tf.data.Dataset.from_tensors(next(iter(dev()))).repeat(2)
  trainer.evaluate(one_batch)
  trainer.evaluate(one_batch)
  assert len(traces) == 2


def test_evaluation_is_per_token_over_all_batches_against_numpy(tmp_path):
  """Trainer.evaluate against the one-hot reference of tests/test_schedule_and_loss.py on the
  model's logits: the label-smoothed loss and the NLL summed over every batch's real tokens and
  divided by all of them (batches of 3, 15 and 10 tokens, so a mean of the batches' means is
  off), perplexity exp(NLL) (not exp(loss)), and `max_batches` batches read, no more."""
  from test_schedule_and_loss import _reference_loss  # pylint: disable=import-outside-toplevel
  hparams = get_hparams(TINY, MICRO)
  trainer = train_loop.Trainer(hparams, 32, str(tmp_path))
  rng = np.random.default_rng(0)
  batches = []
  for rows, length, real in ((1, 6, 3), (3, 7, 1), (2, 5, 5)):
    targets = rng.integers(2, 30, (rows, length)).astype("int32")
    targets[0, real:] = 0  # padding, not counted
    batches.append({"inputs": rng.integers(2, 30, (rows, 4)).astype("int32"), "targets": targets})
  dataset = tf.data.Dataset.from_tensors(batches[0])
  for batch in batches[1:]:
    dataset = dataset.concatenate(tf.data.Dataset.from_tensors(batch))
  sums = [_reference_loss(np.asarray(trainer.model(b, training=False), np.float64), b["targets"],
                          hparams.label_smoothing) for b in batches]
  assert [int(count) for _, count, _ in sums] == [3, 15, 10]
  for max_batches in (2, None):
    used = sums[:max_batches]
    tokens = sum(count for _, count, _ in used)
    loss, nll = sum(s[0] for s in used) / tokens, sum(s[2] for s in used) / tokens
    results = trainer.evaluate(dataset, max_batches)
    assert results["loss"] == pytest.approx(loss, rel=1e-5), max_batches
    assert results["nll"] == pytest.approx(nll, rel=1e-5), max_batches
    assert results["perplexity"] == pytest.approx(np.exp(nll), rel=1e-5), max_batches
    assert abs(np.exp(loss) - np.exp(nll)) > 0.01 * np.exp(nll)  # smoothing makes them differ


def _main(argv, capsys):
  """The trainer command in this process (its command-line form, with a real process, is
  tests/test_t2t_commands.py::test_registry_help_into_head_ends_quietly): (exit status, out, err)."""
  try:
    status = trainer.main(argv)
  except SystemExit as e:
    status = e.code
  captured = capsys.readouterr()
  return status, captured.out, captured.err


def test_cli_errors_exit_2_with_suggestions(tmp_path, capsys):
  status, _, err = _main(["--problem=algorithmic_revers", f"--output_dir={tmp_path}"], capsys)
  assert status == 2 and "Did you mean 'algorithmic_reverse'" in err
  status, _, err = _main(["--problem=algorithmic_reverse", "--hparams=bgi", f"--output_dir={tmp_path}"],
                         capsys)
  assert status == 2 and "Did you mean 'big'" in err
  status, _, err = _main(["--problem=algorithmic_reverse", "--hparams=big,hiden_size=3",
                          f"--output_dir={tmp_path}"], capsys)
  assert status == 2 and "hidden_size" in err
  assert not os.listdir(tmp_path)  # refused before anything was written
  status, out, _ = _main(["--registry_help"], capsys)
  assert status == 0
  assert "translate_ende" in out and "transformer_big" in out


def _checkpoint_step(folder):
  latest = tf.train.latest_checkpoint(str(folder))
  return int(latest.rsplit("-", 1)[1]) if latest else 0


def test_sigkill_then_rerun_resumes_from_last_checkpoint(tmp_path, capsys):
  """Killed mid-training once checkpoint 20 exists, the second (polled, no deadline: the first run
  asks for far more steps than it can reach before the kill, so no speed makes it finish first)."""
  out = tmp_path / "run"
  args = ["--problem=algorithmic_reverse", "--hparams_set=transformer_tiny", f"--hparams={MICRO}",
          f"--data_dir={tmp_path / 'data'}", f"--output_dir={out}",
          "--save_checkpoints_steps=10", "--eval_steps=0", "--log_every=10"]
  log = tmp_path / "first_run.log"  # a file, not a pipe: a full pipe would block the trainer
  with open(log, "w") as stdout:
    proc = subprocess.Popen([sys.executable, "-m", "t2t_lite.bin.trainer", *args,
                             "--train_steps=1000000"], stdout=stdout, stderr=subprocess.STDOUT)
    try:
      while _checkpoint_step(out) < 20:
        assert proc.poll() is None, log.read_text()
        time.sleep(0.2)
    finally:
      proc.send_signal(signal.SIGKILL)
      proc.wait()
  killed_at = _checkpoint_step(out)
  assert killed_at >= 20 and killed_at % 10 == 0
  model_dir.restore_model(str(out))  # loadable after the kill
  status, out_text, err = _main([*args, f"--train_steps={killed_at + 20}"], capsys)  # the rerun
  assert status == 0, out_text + err
  assert "resumed from" in out_text and f"at step {killed_at}" in out_text
  assert _checkpoint_step(out) == killed_at + 20


# Runs the trainer command with a hook that blocks one checkpoint save at a chosen point, after
# writing a marker file, so the test can SIGKILL the process inside that save.
BLOCKED_SAVE_SCRIPT = textwrap.dedent("""
    import os, sys, time
    import tensorflow as tf
    from tensorflow.python.checkpoint import checkpoint_management
    from tensorflow.python.ops import gen_io_ops
    from t2t_lite.bin import trainer
    point, number, marker = sys.argv[1], sys.argv[2], sys.argv[3]

    def block_at(prefix):
      if str(prefix).endswith(f"ckpt-{number}"):
        open(marker, "w").close()
        while True:  # blocked until the test's SIGKILL, however long it takes to come
          time.sleep(60)

    if point == "merge":  # the variables are written to ckpt-N_temp/, not yet merged into ckpt-N.*
      real_merge = gen_io_ops.merge_v2_checkpoints
      def merge(prefixes, destination, **kwargs):
        block_at(destination.numpy().decode())
        return real_merge(prefixes, destination, **kwargs)
      gen_io_ops.merge_v2_checkpoints = merge
    else:  # ckpt-N.* written, the `checkpoint` index not yet pointing at it
      real_update = checkpoint_management.update_checkpoint_state_internal
      def update(save_dir, model_checkpoint_path, *args, **kwargs):
        block_at(model_checkpoint_path)
        return real_update(save_dir, model_checkpoint_path, *args, **kwargs)
      checkpoint_management.update_checkpoint_state_internal = update
    sys.exit(trainer.main(sys.argv[4:]))
""")


def test_kill_inside_a_checkpoint_save_keeps_the_previous_one_and_the_rerun_resumes(tmp_path, capsys):
  out = tmp_path / "run"
  args = ["--problem=algorithmic_copy", "--hparams_set=transformer_tiny", f"--hparams={MICRO}",
          f"--data_dir={tmp_path / 'data'}", f"--output_dir={out}", "--train_steps=8",
          "--save_checkpoints_steps=2", "--eval_steps=0", "--log_every=2"]
  # Killed inside the save of ckpt-4 (a fresh run), then of ckpt-6 (the rerun, from ckpt-2).
  for point, number, resumed_at in (("merge", 4, None), ("index", 6, 2)):
    previous = number - 2
    marker = tmp_path / f"blocked-{point}"
    proc = subprocess.Popen([sys.executable, "-c", BLOCKED_SAVE_SCRIPT, point, str(number),
                             str(marker), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    while not marker.exists():  # the hook writes it inside the save, however long that takes
      assert proc.poll() is None, proc.stdout.read()
      time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    output = proc.communicate()[0]
    if resumed_at:
      assert f"resumed from {out / f'ckpt-{resumed_at}'} at step {resumed_at}" in output, output
    files = os.listdir(out)
    # Killed mid-save: the merge left only its temporary folder; the index left ckpt-N.* unnamed.
    assert (f"ckpt-{number}.index" in files) == (point == "index"), files
    assert tf.train.latest_checkpoint(str(out)).endswith(f"ckpt-{previous}")
    _, _, path = model_dir.restore_model(str(out))  # loadable
    assert path.endswith(f"ckpt-{previous}")
  status, out_text, err = _main(args, capsys)  # the rerun, after the second kill
  assert status == 0, out_text + err
  assert f"resumed from {out / 'ckpt-4'} at step 4" in out_text
  assert tf.train.latest_checkpoint(str(out)).endswith("ckpt-8")
