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
