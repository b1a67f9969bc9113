"""The fused Adam against a numpy reference and against keras.optimizers.Adam."""

import numpy as np
import pytest
import tensorflow as tf
import keras

from t2t_lite.hparams import get_hparams
from t2t_lite.training.adam import Adam
from t2t_lite.training.train_loop import build_optimizer

BETAS = dict(beta_1=0.9, beta_2=0.98, epsilon=1e-9)


def numpy_adam(w, grads, lr, beta_1, beta_2, epsilon):
  """Kingma & Ba's Adam with epsilon added to sqrt(v) (Keras' and T2T's form)."""
  m, v = np.zeros_like(w), np.zeros_like(w)
  for t, g in enumerate(grads, start=1):
    m = beta_1 * m + (1 - beta_1) * g
    v = beta_2 * v + (1 - beta_2) * g * g
    w = w - lr * np.sqrt(1 - beta_2 ** t) / (1 - beta_1 ** t) * m / (np.sqrt(v) + epsilon)
  return w, m, v


def _run(optimizer, w0, grads, compile_mode):
  variable = keras.Variable(w0)
  optimizer.build([variable])

  def apply(g):
    optimizer.apply_gradients([(g, variable)])

  if compile_mode != "eager":
    apply = tf.function(apply, jit_compile=compile_mode == "xla")
  for g in grads:
    apply(tf.constant(g))
  index = optimizer._get_variable_index(variable)
  return (variable.numpy(), optimizer._momentums[index].numpy(),
          optimizer._velocities[index].numpy())


@pytest.mark.parametrize("compile_mode", ["eager", "graph", "xla"])
def test_fused_adam_matches_numpy_and_keras(compile_mode):
  rng = np.random.default_rng(0)
  w0 = rng.normal(size=(33, 17)).astype("float32")
  # Gradients of very different scales, and zeros, so both the m and the v paths matter.
  grads = [rng.normal(size=w0.shape).astype("float32") * scale for scale in (1.0, 1e-3, 10.0, 0.0, 0.5)]
  expected = numpy_adam(w0.astype("float64"), [g.astype("float64") for g in grads], 1e-2, **BETAS)
  ours = _run(Adam(1e-2, **BETAS), w0, grads, compile_mode)
  theirs = _run(keras.optimizers.Adam(1e-2, **BETAS), w0, grads, compile_mode)
  for got, want, keras_value in zip(ours, expected, theirs):
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(got, keras_value, rtol=2e-6, atol=1e-7)
  assert not np.allclose(ours[0], w0)  # it did move


@pytest.mark.parametrize("compile_mode", ["eager", "xla"])
def test_fused_adam_adds_epsilon_to_the_square_root_of_v(compile_mode):
  """Epsilon where it changes the update: with the paper's 1e-9 against sqrt(v) ~ 0.1, the
  test above cannot tell an update without epsilon from the right one. Here gradients of
  scale 1e-3 make sqrt(v) no larger than epsilon = 1e-3, so an update that leaves epsilon out (or
  adds it anywhere but to sqrt(v)) is far from the reference."""
  rng = np.random.default_rng(3)
  w0 = rng.normal(size=(9, 7)).astype("float32")
  grads = [rng.normal(size=w0.shape).astype("float32") * 1e-3 for _ in range(4)]
  betas = dict(BETAS, epsilon=1e-3)
  w64, g64 = w0.astype("float64"), [g.astype("float64") for g in grads]
  expected = numpy_adam(w64, g64, 1e-2, **betas)
  ours = _run(Adam(1e-2, **betas), w0, grads, compile_mode)
  for got, want in zip(ours, expected):  # m ~ 1e-4, v ~ 1e-7: tolerances of their scale
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5 * np.abs(want).max())
  # Without epsilon the weights would move measurably differently.
  step = expected[0] - w64
  without = numpy_adam(w64, g64, 1e-2, **dict(betas, epsilon=0.0))[0] - w64
  assert np.abs(without - step).max() > 0.1 * np.abs(step).max()


def test_fused_adam_with_learning_rate_schedule_and_sparse_gradients():
  """A schedule as the learning rate, and an IndexedSlices gradient (Keras' sparse path)."""
  schedule = keras.optimizers.schedules.ExponentialDecay(1e-2, decay_steps=1, decay_rate=0.5)

  def three_steps(cls):
    table = keras.Variable(np.arange(12, dtype="float32").reshape(6, 2))
    dense = keras.Variable(np.ones((3,), "float32"))
    optimizer = cls(schedule, **BETAS)

    @tf.function
    def step():
      with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(table, [1, 4, 1]) ** 2) + tf.reduce_sum(dense ** 3)
      grads = tape.gradient(loss, [table, dense])
      assert isinstance(grads[0], tf.IndexedSlices)
      optimizer.apply_gradients(zip(grads, [table, dense]))

    for _ in range(3):
      step()
    return table.numpy(), dense.numpy()

  results = [three_steps(cls) for cls in (Adam, keras.optimizers.Adam)]
  for ours, theirs in zip(*results):
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)


@pytest.mark.parametrize("writer, reader", [(keras.optimizers.Adam, Adam), (Adam, keras.optimizers.Adam)])
def test_checkpoints_are_interchangeable_with_keras_adam(tmp_path, writer, reader):
  variable = keras.Variable(np.ones((4, 3), "float32"))
  written = writer(1e-2, **BETAS)
  written.build([variable])
  written.apply_gradients([(tf.fill((4, 3), 0.5), variable)])
  path = tf.train.Checkpoint(optimizer=written, variable=variable).save(str(tmp_path / "ckpt"))

  restored_variable = keras.Variable(np.zeros((4, 3), "float32"))
  read = reader(1e-2, **BETAS)
  read.build([restored_variable])
  tf.train.Checkpoint(optimizer=read, variable=restored_variable).restore(path).assert_consumed()
  assert int(read.iterations.numpy()) == 1
  np.testing.assert_array_equal(restored_variable.numpy(), variable.numpy())
  np.testing.assert_array_equal(read._momentums[0].numpy(), written._momentums[0].numpy())
  np.testing.assert_array_equal(read._velocities[0].numpy(), written._velocities[0].numpy())


def test_trainer_uses_the_fused_adam_with_the_hparams_betas():
  """Each setting away from both Keras' default (0.9, 0.999, 1e-7) and the hparams' (0.9, 0.997,
  1e-9), so that one the optimizer does not take from the hparams shows; mixed_float16 wraps the
  same Adam in a loss-scale optimizer."""
  hp = get_hparams("transformer_base", "optimizer_adam_beta1=0.8,optimizer_adam_beta2=0.95,"
                   "optimizer_adam_epsilon=1e-6")
  for optimizer in (build_optimizer(hp),
                    build_optimizer(hp.replace(mixed_precision="mixed_float16")).inner_optimizer):
    assert isinstance(optimizer, Adam) and not optimizer.aggregate_gradients
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.8, 0.95, 1e-6)
  assert isinstance(Adam.from_config(optimizer.get_config()), Adam)
