"""The exponential moving average of the weights (hparams weight_ema_decay) against NumPy:
average_0 = the starting weights, average_k = d * average_(k-1) + (1 - d) * weights_k after
update k; on one device (on every replica of MirroredStrategy over 2 logical CPUs:
tests/test_data_parallel.py, in its process with logical devices); saved with the checkpoint and
what evaluation, decoding and export load."""

import numpy as np
import pytest

from t2t_lite import model_dir
from t2t_lite.hparams import get_hparams
from t2t_lite.training import train_loop

DECAY = 0.7
MICRO = ("hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1,batch_size=256,"
         "max_length=16,eval_bleu_examples=0,learning_rate_warmup_steps=4")


def numpy_ema(weights, decay=DECAY):
  """[update k] -> {name: array} (k = 0: the starting weights) -> the average after the last."""
  average = {n: w.astype(np.float64) for n, w in weights[0].items()}
  for step in weights[1:]:
    average = {n: decay * average[n] + (1 - decay) * step[n] for n in average}
  return average


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """One device, 3 updates with weight_ema_decay: (trainer, weights before/after each update)."""
  out = tmp_path_factory.mktemp("ema") / "run"
  trainer = train_loop.Trainer(get_hparams("transformer_tiny", MICRO).replace(weight_ema_decay=DECAY),
                               32, str(out))
  variables = model_dir.checkpointable(trainer.model)
  weights = [{n: variables[n].numpy() for n in trainer.ema}]
  rng = np.random.default_rng(0)
  for _ in range(3):
    trainer.train_step({"inputs": rng.integers(2, 30, (4, 7)).astype("int32"),
                        "targets": rng.integers(2, 30, (4, 9)).astype("int32")})
    weights.append({n: variables[n].numpy() for n in trainer.ema})
  model_dir.write_model_dir(str(out), trainer.hparams, "algorithmic_copy", vocab_size=32)
  trainer.save()
  return trainer, weights, out


def test_ema_equals_numpy_on_one_device(trained):
  trainer, weights, _ = trained
  expected = numpy_ema(weights)
  assert len(expected) == len(trainer.model.trainable_variables)
  for name, value in expected.items():
    np.testing.assert_allclose(trainer.ema[name].numpy(), value, rtol=1e-5, atol=1e-7, err_msg=name)
  # The weights moved, and the average lies between (a test that could not tell them apart
  # would pass with the weights themselves).
  assert not np.allclose(weights[-1]["shared_embedding/embeddings"],
                         expected["shared_embedding/embeddings"], atol=1e-6)


def test_evaluation_and_the_saved_model_use_the_averages(trained):
  trainer, weights, out = trained
  variables = model_dir.checkpointable(trainer.model)
  with trainer.evaluated_weights() as model:
    assert model is trainer.model
    for name, average in trainer.ema.items():
      np.testing.assert_array_equal(variables[name].numpy(), average.numpy())
  for name, value in weights[-1].items():  # the trained weights are back
    np.testing.assert_array_equal(variables[name].numpy(), value)
  _, restored, _ = model_dir.restore_model(str(out))  # what the decoder and exporter load
  for name, variable in model_dir.checkpointable(restored).items():
    if name in trainer.ema:
      np.testing.assert_array_equal(variable.numpy(), trainer.ema[name].numpy(), err_msg=name)
  resumed = train_loop.Trainer(trainer.hparams, 32, str(out))  # the averages resume too
  for name, average in resumed.ema.items():
    np.testing.assert_array_equal(average.numpy(), trainer.ema[name].numpy())


def test_the_decay_is_checked():
  with pytest.raises(ValueError, match="weight_ema_decay must be in"):
    get_hparams("transformer_tiny", "weight_ema_decay=1.0")


def test_keras_fit_ends_with_the_moving_average_of_weight_ema_decay():
  """Keras' fit with weight_ema_decay: Keras' own average (it starts at the weights after the
  first update), which replaces the weights when fit ends."""
  import keras  # pylint: disable=import-outside-toplevel
  from t2t_lite.training import keras_fit  # pylint: disable=import-outside-toplevel
  hparams = get_hparams("transformer_tiny", MICRO).replace(weight_ema_decay=DECAY)
  train_loop.seed_initialization(hparams.seed)
  model = model_dir.build_model(hparams, 32)
  keras_fit.compile_model(model, hparams, jit_compile=False)
  variables = {n: v for n, v in model_dir.checkpointable(model).items() if v.trainable}
  weights = []

  class Record(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
      weights.append({n: v.numpy() for n, v in variables.items()})

  rng = np.random.default_rng(0)
  features = {"inputs": rng.integers(2, 30, (12, 7)).astype("int32"),
              "targets": rng.integers(2, 30, (12, 9)).astype("int32")}
  model.fit(features, features["targets"], batch_size=4, epochs=1, shuffle=False, verbose=0,
            callbacks=[Record()])
  assert len(weights) == 3
  expected = numpy_ema(weights)
  for name, variable in variables.items():
    np.testing.assert_allclose(variable.numpy(), expected[name], rtol=1e-5, atol=1e-7, err_msg=name)
  assert not np.allclose(weights[-1]["shared_embedding/embeddings"],
                         variables["shared_embedding/embeddings"].numpy(), atol=1e-6)


def test_an_update_that_loss_scaling_skips_leaves_the_average_alone(tmp_path):
  """mixed_float16: an update whose scaled gradients overflow is skipped by the optimizer (the
  step does not count, the weights stay); the average must not move towards them either."""
  hparams = get_hparams("transformer_tiny", MICRO).replace(weight_ema_decay=DECAY,
                                                           mixed_precision="mixed_float16")
  try:
    trainer = train_loop.Trainer(hparams, 32, str(tmp_path / "mixed"))
    rng = np.random.default_rng(0)
    batch = {"inputs": rng.integers(2, 30, (4, 7)).astype("int32"),
             "targets": rng.integers(2, 30, (4, 9)).astype("int32")}
    trainer.optimizer.dynamic_scale.assign(1.0)  # no overflow: a real update
    trainer.train_step(batch)
    assert trainer.step == 1
    averages = {n: a.numpy() for n, a in trainer.ema.items()}
    variables = model_dir.checkpointable(trainer.model)
    weights = {n: variables[n].numpy() for n in trainer.ema}
    assert not np.allclose(averages["shared_embedding/embeddings"], weights["shared_embedding/embeddings"])
    trainer.optimizer.dynamic_scale.assign(1e30)  # float16 gradients overflow: a skipped update
    trainer.train_step(batch)
    assert trainer.step == 1 and float(trainer.optimizer.dynamic_scale.numpy()) == pytest.approx(5e29)
    for name, average in trainer.ema.items():
      np.testing.assert_array_equal(variables[name].numpy(), weights[name], err_msg=name)
      np.testing.assert_array_equal(average.numpy(), averages[name], err_msg=name)
  finally:
    model_dir.set_precision_policy(hparams.replace(mixed_precision="float32"))


def test_the_training_runs_evaluations_see_the_averages(tmp_path, monkeypatch):
  """train_and_evaluate evaluates (dev loss, and `evaluate_fn`: BLEU) with the averages in the
  model, as decoding and export load it, and trains on with the weights themselves; the test
  above checks `evaluated_weights`, not that the run evaluates inside it."""
  from t2t_lite.problems import get_problem  # pylint: disable=import-outside-toplevel
  trainers, seen = [], []

  class Recorded(train_loop.Trainer):
    def __init__(self, *args, **kwargs):
      super().__init__(*args, **kwargs)
      trainers.append(self)

  def evaluate_fn(model):
    seen.append({n: v.numpy() for n, v in model_dir.checkpointable(model).items()})
    return {"score": 1.0}

  monkeypatch.setattr(train_loop, "Trainer", Recorded)
  hparams = get_hparams("transformer_tiny", MICRO).replace(weight_ema_decay=DECAY)
  train_loop.train_and_evaluate(get_problem("algorithmic_copy"), hparams, str(tmp_path / "run"),
                                str(tmp_path / "data"), train_steps=2, eval_steps=1,
                                save_checkpoints_steps=2, log_every=2, evaluate_fn=evaluate_fn)
  (trainer,), (evaluated,) = trainers, seen  # one evaluation, at the last update
  variables = model_dir.checkpointable(trainer.model)
  name = "shared_embedding/embeddings"
  assert not np.allclose(variables[name].numpy(), trainer.ema[name].numpy(), atol=1e-6)
  for name, average in trainer.ema.items():
    np.testing.assert_array_equal(evaluated[name], average.numpy(), err_msg=name)
