"""The trainer: distribution, resuming after SIGKILL, averaging, refusing bad input (what training
reaches: tests/test_training_outcomes.py)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import model_dir
from t2t_lite.hparams import get_hparams
from t2t_lite.problems import get_problem
from t2t_lite.training import average, train_loop

TINY = "transformer_tiny"
# A very small model for the plumbing tests; the learning test uses the real tiny set.
MICRO = ("hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1,batch_size=256,"
         "max_length=16,eval_bleu_examples=0")


def _run(args, env=None):
  """The trainer command, run to its end (no deadline: a slow machine is not a failure)."""
  env = dict(os.environ, **(env or {}))
  return subprocess.run([sys.executable, "-m", "t2t_lite.bin.trainer", *args], capture_output=True,
                        text=True, env=env)


def test_checkpoint_restores_every_model_variable(tmp_path):
  problem = get_problem("algorithmic_copy")
  out = str(tmp_path / "run")
  train_loop.train_and_evaluate(problem, get_hparams(TINY, MICRO), out, str(tmp_path / "data"),
                             train_steps=3, eval_steps=0, save_checkpoints_steps=3)
  _, restored, _ = model_dir.restore_model(out)
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(out))
  saved = {n for n in reader.get_variable_to_shape_map() if n.startswith("model/")}
  assert len(saved) == len(restored.weights)
  fresh = model_dir.build_model(get_hparams(TINY, MICRO), problem.get_vocab(None).vocab_size)
  differs = [not np.array_equal(a, b) for a, b in zip(fresh.get_weights(), restored.get_weights())]
  assert sum(differs) >= len(differs) - 4  # all but maybe a few untouched (e.g. LayerNorm) weights


def test_hparams_json_records_overrides_and_refuses_other_hparams(tmp_path):
  problem = get_problem("algorithmic_copy")
  out, data = str(tmp_path / "run"), str(tmp_path / "data")
  hparams = get_hparams(TINY, MICRO)
  train_loop.train_and_evaluate(problem, hparams, out, data, train_steps=2, eval_steps=1,
                             save_checkpoints_steps=2, flags={"problem": "algorithmic_copy"})
  assert model_dir.read_model_dir(out) == ("algorithmic_copy", hparams)
  with pytest.raises(model_dir.ModelDirError, match="other settings.*hidden_size"):
    train_loop.train_and_evaluate(problem, hparams.replace(hidden_size=64), out, data, train_steps=4)
  # Asking to overwrite starts over.
  train_loop.train_and_evaluate(problem, hparams.replace(hidden_size=64), out, data, train_steps=1,
                             eval_steps=0, overwrite=True)
  assert model_dir.read_model_dir(out)[1].hidden_size == 64


def test_checkpoint_averaging_is_the_elementwise_mean(tmp_path):
  problem = get_problem("algorithmic_copy")
  out, data = str(tmp_path / "run"), str(tmp_path / "data")
  train_loop.train_and_evaluate(problem, get_hparams(TINY, MICRO), out, data, train_steps=6,
                             eval_steps=0, save_checkpoints_steps=2)
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


def test_cli_errors_exit_2_with_suggestions(tmp_path):
  result = _run(["--problem=algorithmic_revers", f"--output_dir={tmp_path}"])
  assert result.returncode == 2 and "Did you mean 'algorithmic_reverse'" in result.stderr
  result = _run(["--problem=algorithmic_reverse", "--hparams=bgi", f"--output_dir={tmp_path}"])
  assert result.returncode == 2 and "Did you mean 'big'" in result.stderr
  result = _run(["--problem=algorithmic_reverse", "--hparams=big,hiden_size=3", f"--output_dir={tmp_path}"])
  assert result.returncode == 2 and "hidden_size" in result.stderr
  result = _run(["--registry_help"])
  assert result.returncode == 0
  assert "translate_ende" in result.stdout and "transformer_big" in result.stdout


def _checkpoint_step(folder):
  latest = tf.train.latest_checkpoint(str(folder))
  return int(latest.rsplit("-", 1)[1]) if latest else 0


def test_sigkill_then_rerun_resumes_from_last_checkpoint(tmp_path):
  """Killed mid-training once checkpoint 40 exists (polled, no deadline: the first run asks for
  far more steps than it can reach before the kill, so no speed makes it finish first)."""
  out = tmp_path / "run"
  args = ["--problem=algorithmic_reverse", "--hparams_set=transformer_tiny", f"--hparams={MICRO}",
          f"--data_dir={tmp_path / 'data'}", f"--output_dir={out}",
          "--save_checkpoints_steps=20", "--eval_steps=0", "--log_every=20"]
  log = tmp_path / "first_run.log"  # a file, not a pipe: a full pipe would block the trainer
  with open(log, "w") as stdout:
    proc = subprocess.Popen([sys.executable, "-m", "t2t_lite.bin.trainer", *args,
                             "--train_steps=1000000"], stdout=stdout, stderr=subprocess.STDOUT)
    try:
      while _checkpoint_step(out) < 40:
        assert proc.poll() is None, log.read_text()
        time.sleep(0.2)
    finally:
      proc.send_signal(signal.SIGKILL)
      proc.wait()
  killed_at = _checkpoint_step(out)
  assert killed_at >= 40 and killed_at % 20 == 0
  model_dir.restore_model(str(out))  # loadable after the kill
  result = _run([*args, f"--train_steps={killed_at + 40}"])
  assert result.returncode == 0, result.stdout + result.stderr
  assert "resumed from" in result.stdout and f"at step {killed_at}" in result.stdout
  assert _checkpoint_step(out) == killed_at + 40


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


def test_kill_inside_a_checkpoint_save_keeps_the_previous_one_and_the_rerun_resumes(tmp_path):
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
  result = _run(args)
  assert result.returncode == 0, result.stdout + result.stderr
  assert f"resumed from {out / 'ckpt-4'} at step 4" in result.stdout
  assert tf.train.latest_checkpoint(str(out)).endswith("ckpt-8")


MIRRORED_SCRIPT = textwrap.dedent("""
    import sys, numpy as np, tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from t2t_lite.hparams import get_hparams
    from t2t_lite.training import train_loop
    hp = get_hparams("transformer_tiny", sys.argv[1] + ",layer_prepostprocess_dropout=0,"
                     "attention_dropout=0,relu_dropout=0")
    rng = np.random.default_rng(0)
    batches = [{"inputs": rng.integers(2, 30, (8, 7)).astype("int32"),
                "targets": rng.integers(0, 30, (8, 9)).astype("int32")} for _ in range(3)]
    for b in batches:
      b["targets"][:, -2:] = 0  # some padding: the global token count must be used
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    one = train_loop.Trainer(hp, 32, sys.argv[2] + "/one")
    two = train_loop.Trainer(hp, 32, sys.argv[2] + "/two", strategy=strategy)
    two.model.set_weights(one.model.get_weights())
    stacked = {k: np.stack([b[k] for b in batches]) for k in batches[0]}
    dist = iter(strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices(stacked).unbatch().batch(8)))
    for b in batches:
      l1, _ = one.train_step(b)
      l2, _ = two.train_step(next(dist))
      print("loss", float(l1), float(l2))
      assert abs(float(l1) - float(l2)) < 1e-5 * max(1, abs(float(l1))), (float(l1), float(l2))
    for x, y in zip(one.model.get_weights(), two.model.get_weights()):
      np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6)
    print("replicas", strategy.num_replicas_in_sync, "OK")
""")


def test_mirrored_strategy_equals_one_device(tmp_path):
  result = subprocess.run([sys.executable, "-c", MIRRORED_SCRIPT, MICRO, str(tmp_path)],
                          capture_output=True, text=True)
  assert result.returncode == 0, result.stdout + result.stderr
  assert "replicas 2 OK" in result.stdout


def test_multi_worker_trains_and_chief_writes_checkpoint(tmp_path, worker_envs):
  out = tmp_path / "run"
  args = ["--problem=algorithmic_copy", "--hparams_set=transformer_tiny", f"--hparams={MICRO}",
          f"--data_dir={tmp_path / 'data'}", f"--output_dir={out}", "--train_steps=4",
          "--save_checkpoints_steps=2", "--eval_steps=0", "--log_every=1"]
  logs = [tmp_path / f"worker_{i}.log" for i in range(2)]
  with open(logs[0], "w") as log_0, open(logs[1], "w") as log_1:
    procs = [subprocess.Popen([sys.executable, "-m", "t2t_lite.bin.trainer", *args], env=env,
                              stdout=log, stderr=subprocess.STDOUT)
             for env, log in zip(worker_envs(2), (log_0, log_1))]
    # No deadline: wait for both; a worker that fails ends the other (which would wait for it).
    while any(p.poll() is None for p in procs):
      if any(p.poll() not in (None, 0) for p in procs):
        for p in procs:
          p.kill()
      time.sleep(0.2)
  outputs = [log.read_text() for log in logs]
  assert all(p.returncode == 0 for p in procs), "\n\n".join(outputs)
  assert tf.train.latest_checkpoint(str(out)).endswith("-4")
  assert "saved" in outputs[0]
  # Worker 1 saved what it holds to its own folder: the same weights as the chief's checkpoint.
  readers = [tf.train.load_checkpoint(tf.train.latest_checkpoint(str(folder)))
             for folder in (out, out / ".worker_1")]
  names = [n for n in readers[0].get_variable_to_shape_map() if n.startswith("model/")]
  assert len(names) > 10 and readers[1].get_variable_to_shape_map().keys() >= set(names)
  for name in names:
    np.testing.assert_array_equal(readers[0].get_tensor(name), readers[1].get_tensor(name))
