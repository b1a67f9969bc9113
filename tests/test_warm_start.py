"""Warm start (T2T's --warm_start_from): a new model directory from another model's weights.

The reference is the source checkpoint itself, read with tf.train.load_checkpoint: the new run
must start from exactly its weights, with a fresh optimizer (zero moments, step 0) unless asked
to keep them; a source that does not fit is a clear error naming what differs.
"""

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import model_dir
from t2t_lite.bin import trainer
from t2t_lite.hparams import get_hparams
from t2t_lite.problems import get_problem
from t2t_lite.training import train_loop

MICRO = ("hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1,batch_size=256,"
         "max_length=16,eval_bleu_examples=0")
SOURCE_STEPS = 4


@pytest.fixture(scope="module")
def source(tmp_path_factory):
  """A copy-task model trained SOURCE_STEPS updates: (model dir, its checkpoint prefix)."""
  out = tmp_path_factory.mktemp("source") / "model"
  train_loop.train_and_evaluate(get_problem("algorithmic_copy"), get_hparams("transformer_tiny", MICRO),
                                str(out), None, train_steps=SOURCE_STEPS, eval_steps=0,
                                save_checkpoints_steps=SOURCE_STEPS, log_every=SOURCE_STEPS)
  return out, tf.train.latest_checkpoint(str(out))


def _saved(checkpoint, root):
  """{name: array} of the checkpoint's variables under `root` ("model" or "optimizer")."""
  reader = tf.train.load_checkpoint(checkpoint)
  return {name: reader.get_tensor(name) for name, _ in tf.train.list_variables(checkpoint)
          if name.startswith(root + "/") and "seed_generator_state" not in name}


def _warm_trainer(source, folder, **options):
  hparams = model_dir.read_model_dir(str(source[0]))[1]
  vocab_size = model_dir.read_record(str(source[0]))["vocab_size"]
  return train_loop.Trainer(hparams, vocab_size, str(folder),
                            warm_start=model_dir.WarmStart(source[1], **options))


def _model_arrays(trainer_):
  return {n: v.numpy() for n, v in model_dir.checkpointable(trainer_.model).items()
          if not n.endswith("seed_generator_state")}


def test_warm_start_restores_exactly_the_source_weights_with_a_fresh_optimizer(source, tmp_path):
  warm = _warm_trainer(source, tmp_path / "new")
  saved = model_dir.checkpoint_shapes(source[1])
  reader = tf.train.load_checkpoint(source[1])
  weights = _model_arrays(warm)
  assert set(weights) == {n for n in saved if not n.endswith("seed_generator_state")}
  for name, value in weights.items():
    key = "model/" + name.replace(".", "..").replace("/", ".S") + "/.ATTRIBUTES/VARIABLE_VALUE"
    np.testing.assert_array_equal(value, reader.get_tensor(key), err_msg=name)
  assert warm.step == 0 and warm.warm_started_from == source[1]
  slots = [v.numpy() for v in warm.optimizer.variables if v is not warm.optimizer.iterations]
  assert slots and all(not np.any(s) for s in slots if s.ndim)  # Adam's moments start at zero
  # The source's moments are not zero: a fresh state is a choice, not the only possibility.
  assert any(np.any(v) for v in _saved(source[1], "optimizer/_variables").values())


def test_warm_start_keeps_the_optimizer_state_and_the_step_when_asked(source, tmp_path):
  kept = _warm_trainer(source, tmp_path / "kept", keep_optimizer=True)
  assert kept.step == 0  # the moments, not the schedule
  saved = _saved(source[1], "optimizer/_variables")
  ours = {f"optimizer/_variables/{i}/.ATTRIBUTES/VARIABLE_VALUE": v.numpy()
          for i, v in enumerate(kept.optimizer.variables[1:], start=1)}
  assert set(saved) <= set(ours) | {"optimizer/_variables/0/.ATTRIBUTES/VARIABLE_VALUE"}
  for name, value in saved.items():
    if name in ours:
      np.testing.assert_array_equal(ours[name], value, err_msg=name)
  stepped = _warm_trainer(source, tmp_path / "stepped", keep_step=True)
  assert stepped.step == SOURCE_STEPS
  assert all(not np.any(v.numpy()) for v in stepped.optimizer.variables[1:])


def test_the_command_fine_tunes_into_a_new_directory_with_the_source_vocabulary(source, tmp_path, capsys):
  out = tmp_path / "tuned"
  assert trainer.main(["--problem=algorithmic_copy", f"--output_dir={out}",
                       f"--warm_start_from={source[0]}", "--train_steps=2", "--eval_steps=0",
                       "--local_eval_frequency=2", "--hparams=learning_rate_constant=0.5"]) == 0
  assert (out / model_dir.VOCAB_FILE).read_bytes() == (source[0] / model_dir.VOCAB_FILE).read_bytes()
  tuned = model_dir.read_model_dir(str(out))[1]
  assert tuned == model_dir.read_model_dir(str(source[0]))[1].replace(learning_rate_constant=0.5)
  assert tf.train.latest_checkpoint(str(out)).endswith("ckpt-2")  # the step starts again at 0
  # Rerunning resumes the new directory; the warm start is not applied a second time (which would
  # start again at step 0 and train). To the same train_steps: the restore is what is checked.
  assert "warm start from" in capsys.readouterr().out
  assert trainer.main(["--problem=algorithmic_copy", f"--output_dir={out}",
                       f"--warm_start_from={source[0]}", "--train_steps=2", "--eval_steps=0",
                       "--local_eval_frequency=2", "--hparams=learning_rate_constant=0.5"]) == 0
  printed = capsys.readouterr().out
  assert f"resumed from {out / 'ckpt-2'} at step 2" in printed and "nothing to do" in printed
  assert "warm start from" not in printed


def test_an_architecture_change_is_refused_naming_the_field(source, tmp_path, capsys):
  with pytest.raises(SystemExit) as exit_:
    trainer.main(["--problem=algorithmic_copy", f"--output_dir={tmp_path / 'x'}",
                  f"--warm_start_from={source[0]}", "--hparams=transformer_tiny,hidden_size=64"])
  assert exit_.value.code == 2
  err = capsys.readouterr().err
  assert "hidden_size" in err and "(32, 64)" in err
  assert not (tmp_path / "x").exists()


def test_a_checkpoint_that_does_not_fit_is_refused_naming_the_variables(source, tmp_path):
  hparams = model_dir.read_model_dir(str(source[0]))[1]
  vocab_size = model_dir.read_record(str(source[0]))["vocab_size"]
  with pytest.raises(model_dir.ModelDirError, match=r"shapes differ.*shared_embedding.*\[\d+, 32\]"):
    train_loop.Trainer(hparams, vocab_size + 7, str(tmp_path / "v"),
                       warm_start=model_dir.WarmStart(source[1]))
  with pytest.raises(model_dir.ModelDirError, match="lacks: decoder/layer_1"):
    train_loop.Trainer(hparams.replace(num_decoder_layers=2), vocab_size, str(tmp_path / "l"),
                       warm_start=model_dir.WarmStart(source[1]))


def test_another_vocabulary_in_the_output_dir_is_refused(source, tmp_path, capsys):
  out = tmp_path / "other"
  out.mkdir()
  (out / model_dir.VOCAB_FILE).write_bytes(b"not the source's vocabulary")
  with pytest.raises(model_dir.ModelDirError, match="another vocabulary"):
    model_dir.warm_start_settings(str(source[0]), str(out))
  with pytest.raises(SystemExit):
    trainer.main(["--problem=algorithmic_copy", f"--output_dir={out}",
                  f"--warm_start_from={source[0]}", "--train_steps=1"])
  assert "another vocabulary" in capsys.readouterr().err


def test_a_missing_source_is_a_clear_error(tmp_path, capsys):
  with pytest.raises(SystemExit) as exit_:
    trainer.main(["--problem=algorithmic_copy", f"--output_dir={tmp_path / 'o'}",
                  f"--warm_start_from={tmp_path / 'nowhere' / 'ckpt-5'}"])
  assert exit_.value.code == 2 and "neither a model directory nor a checkpoint" in capsys.readouterr().err


def _checkpoint_arrays(checkpoint, root):
  """{variable path: array} of the model variables saved under `root` ("model" or "ema")."""
  reader = tf.train.load_checkpoint(checkpoint)
  return {name: reader.get_tensor(f"{root}/" + name.replace(".", "..").replace("/", ".S")
                                  + "/.ATTRIBUTES/VARIABLE_VALUE")
          for name in model_dir.checkpoint_shapes(checkpoint, root)
          if not name.endswith("seed_generator_state")}


def test_a_source_with_moving_averages_starts_from_them(tmp_path):
  """As the decoder loads it: its weights' moving averages; with keep_optimizer the trained
  weights, which Adam's moments belong to."""
  hparams = get_hparams("transformer_tiny", MICRO).replace(weight_ema_decay=0.5)
  ema_source = train_loop.Trainer(hparams, 32, str(tmp_path / "ema_source"))
  rng = np.random.default_rng(0)
  for _ in range(2):
    ema_source.train_step({"inputs": rng.integers(2, 30, (4, 7)).astype("int32"),
                           "targets": rng.integers(2, 30, (4, 9)).astype("int32")})
  checkpoint = ema_source.save()
  averages, trained = _checkpoint_arrays(checkpoint, "ema"), _checkpoint_arrays(checkpoint, "model")
  assert averages and not np.allclose(averages["shared_embedding/embeddings"],
                                      trained["shared_embedding/embeddings"])
  plain = hparams.replace(weight_ema_decay=0.0)
  for folder, options, expected in (("tuned", {}, averages),
                                    ("continued", {"keep_optimizer": True}, trained)):
    warm = train_loop.Trainer(plain, 32, str(tmp_path / folder),
                              warm_start=model_dir.WarmStart(checkpoint, **options))
    weights = _model_arrays(warm)
    for name, value in expected.items():
      np.testing.assert_array_equal(weights[name], value, err_msg=f"{folder}: {name}")


def test_a_run_with_moving_averages_starts_them_at_the_warm_start_weights(source, tmp_path):
  """The new run's averages (its weight_ema_decay, the source has none) start from the source's
  weights, not from the new model's random initialization: they are what its evaluations and
  checkpoints use, and would otherwise mix in a random model for hundreds of updates."""
  hparams = model_dir.read_model_dir(str(source[0]))[1].replace(weight_ema_decay=0.9)
  vocab_size = model_dir.read_record(str(source[0]))["vocab_size"]
  saved = _checkpoint_arrays(source[1], "model")
  fresh = train_loop.Trainer(hparams, vocab_size, str(tmp_path / "fresh"))  # no warm start
  name = "shared_embedding/embeddings"
  assert not np.allclose(fresh.ema[name].numpy(), saved[name])
  for folder, options in (("tuned", {}), ("continued", {"keep_optimizer": True})):
    warm = train_loop.Trainer(hparams, vocab_size, str(tmp_path / folder),
                              warm_start=model_dir.WarmStart(source[1], **options))
    assert set(warm.ema) == set(saved)
    for name, average in warm.ema.items():
      np.testing.assert_array_equal(average.numpy(), saved[name], err_msg=f"{folder}: {name}")
