"""The learning-rate schedule against the paper's formula; the loss against a one-hot reference."""

import numpy as np
import pytest
from keras import ops

from t2t_lite.hparams import get_hparams
from t2t_lite.training.loss import smoothed_cross_entropy
from t2t_lite.training.schedule import TransformerSchedule


@pytest.mark.parametrize("step", [1, 10, 1000, 3999, 4000, 4001, 10000, 100000])
def test_noam_matches_paper_formula(step):
  schedule = TransformerSchedule.from_hparams(get_hparams("transformer_base_v1"))
  expected = 512 ** -0.5 * min(step ** -0.5, step * 4000 ** -1.5)
  # Keras passes the 0-based optimizer counter; update `step` is counter step - 1.
  assert float(schedule(step - 1)) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("step", [1, 500, 8000, 20000])
def test_t2t_rsqrt_decay_is_the_paper_curve_times_the_constant(step):
  hp = get_hparams("transformer_base")
  expected = 2.0 * 512 ** -0.5 * min(step ** -0.5, step * 8000 ** -1.5)
  assert float(TransformerSchedule.from_hparams(hp)(step - 1)) == pytest.approx(expected, rel=1e-6)


def test_schedule_counts_updates_not_micro_batches():
  hp = get_hparams("transformer_base_v1", "gradient_accumulation_steps=4")
  schedule = TransformerSchedule.from_hparams(hp)
  # micro-steps 0..3 are update 1, 4..7 update 2.
  assert float(schedule(3)) == pytest.approx(512 ** -0.5 * 1 * 4000 ** -1.5, rel=1e-6)
  assert float(schedule(4)) == pytest.approx(512 ** -0.5 * 2 * 4000 ** -1.5, rel=1e-6)


def _reference_loss(logits, targets, eps):
  """Cross entropy against an explicit smoothed one-hot distribution, minus its entropy."""
  v = logits.shape[-1]
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  dist = np.full(logits.shape, eps / (v - 1))
  np.put_along_axis(dist, targets[..., None], 1 - eps, axis=-1)
  ce = -(dist * logp).sum(-1)
  entropy = -(dist * np.log(dist)).sum(-1) if eps > 0 else 0.0
  mask = targets != 0
  nll = -np.take_along_axis(logp, targets[..., None], -1)[..., 0]
  return ((ce - entropy) * mask).sum(), mask.sum(), (nll * mask).sum()


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.2])
def test_smoothed_loss_matches_one_hot_reference(eps):
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(3, 5, 11)).astype("float32") * 3
  targets = rng.integers(1, 11, size=(3, 5))
  targets[0, 3:] = 0
  targets[2, 1:] = 0
  loss, count, nll = (float(ops.convert_to_numpy(t)) for t in smoothed_cross_entropy(logits, targets, eps))
  ref_loss, ref_count, ref_nll = _reference_loss(logits.astype("float64"), targets, eps)
  assert count == ref_count == 9
  assert loss == pytest.approx(ref_loss, rel=1e-5)
  assert nll == pytest.approx(ref_nll, rel=1e-5)


def test_perfect_prediction_has_zero_smoothed_loss():
  eps, v = 0.1, 7
  probs = np.full((1, 2, v), eps / (v - 1))
  targets = np.array([[3, 5]])
  np.put_along_axis(probs, targets[..., None], 1 - eps, axis=-1)
  loss, _, _ = smoothed_cross_entropy(np.log(probs).astype("float32"), targets, eps)
  assert abs(float(ops.convert_to_numpy(loss))) < 1e-5


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("graph", [False, True])
def test_fast_loss_and_its_gradient_equal_the_reference(eps, graph):
  """The XLA kernel with a hand-written gradient against the one-hot reference and autodiff of
  the keras.ops loss: values, d loss_sum / d logits and d nll_sum / d logits."""
  import tensorflow as tf
  from t2t_lite.training.loss import fast_smoothed_cross_entropy
  rng = np.random.default_rng(1)
  logits = tf.constant(rng.normal(size=(3, 5, 11)).astype("float32") * 3)
  targets = rng.integers(1, 11, size=(3, 5))
  targets[0, 3:] = 0
  targets[2, 1:] = 0
  targets = tf.constant(targets, tf.int32)

  def values_and_grads(loss_fn):
    with tf.GradientTape(persistent=True) as tape:
      tape.watch(logits)
      loss, count, nll = loss_fn(logits, targets, eps)
      mixed = 0.3 * loss + 0.7 * nll  # both upstream gradients non-zero
    return loss, count, nll, tape.gradient(loss, logits), tape.gradient(mixed, logits)

  fast_fn = tf.function(lambda: values_and_grads(fast_smoothed_cross_entropy)) if graph else (
      lambda: values_and_grads(fast_smoothed_cross_entropy))
  fast = [np.asarray(t) for t in fast_fn()]
  slow = [np.asarray(t) for t in values_and_grads(smoothed_cross_entropy)]
  ref_loss, ref_count, ref_nll = _reference_loss(np.asarray(logits, np.float64), np.asarray(targets), eps)
  assert float(fast[0]) == pytest.approx(ref_loss, rel=1e-5)
  assert float(fast[1]) == ref_count == 9
  assert float(fast[2]) == pytest.approx(ref_nll, rel=1e-5)
  np.testing.assert_allclose(fast[3], slow[3], atol=1e-6)
  np.testing.assert_allclose(fast[4], slow[4], atol=1e-6)
  assert np.all(fast[3][0, 3:] == 0) and np.all(fast[3][2, 1:] == 0)  # padding gets no gradient


def test_fast_loss_keeps_working_as_batch_shapes_change():
  """Training feeds a new [batch, length] for each length bucket; the compiled kernel then
  traces with unknown dimensions and must still give the reference values."""
  import tensorflow as tf
  from t2t_lite.training.loss import fast_smoothed_cross_entropy
  rng = np.random.default_rng(2)
  for batch, length in ((3, 5), (2, 9), (4, 2), (1, 7)):
    logits = rng.normal(size=(batch, length, 13)).astype("float32")
    targets = rng.integers(0, 13, size=(batch, length))
    loss, count, nll = (float(t) for t in fast_smoothed_cross_entropy(
        tf.constant(logits), tf.constant(targets, tf.int32), 0.1))
    ref_loss, ref_count, ref_nll = _reference_loss(logits.astype("float64"), targets, 0.1)
    assert count == ref_count
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    assert nll == pytest.approx(ref_nll, rel=1e-5)


@pytest.mark.parametrize("compact,jit", [(True, False), (False, False), (False, True)])
def test_projected_loss_and_gradients_equal_projection_then_reference(compact, jit):
  """The fused projection + loss against `smoothed_cross_entropy(features @ table^T)` by autodiff,
  with padding (compacted away, or weighted 0) and row padding (row_multiple 4)."""
  import tensorflow as tf
  from t2t_lite.training.loss import projected_cross_entropy
  rng = np.random.RandomState(0)
  features = tf.constant(rng.normal(size=(3, 5, 8)).astype("float32"))
  table = tf.constant(rng.normal(size=(13, 8)).astype("float32"))
  targets = tf.constant([[4, 2, 12, 0, 0], [1, 3, 0, 0, 0], [5, 6, 7, 8, 9]], tf.int32)

  def values_and_grads(loss_fn):
    with tf.GradientTape() as tape:
      tape.watch([features, table])
      loss, count, nll = loss_fn()
    return (loss, count, nll) + tuple(tape.gradient(loss, [features, table]))

  expected = values_and_grads(lambda: smoothed_cross_entropy(
      tf.matmul(features, table, transpose_b=True), targets, 0.1))
  fused = tf.function(lambda: values_and_grads(lambda: projected_cross_entropy(
      features, table, targets, 0.1, compact=compact, row_multiple=4)), jit_compile=jit or None)
  actual = fused()
  for a, e in zip(actual, expected):
    np.testing.assert_allclose(ops.convert_to_numpy(a), ops.convert_to_numpy(e), rtol=1e-4, atol=1e-5)
  assert float(actual[1]) == 10.0
  # Padded positions get no gradient.
  np.testing.assert_array_equal(ops.convert_to_numpy(actual[3])[0, 3:], 0.0)


@pytest.mark.parametrize("compact", [True, False])
def test_projected_loss_with_a_logits_bias_equals_the_reference(compact):
  """`bias` (an imported model's logits bias): the loss of `features @ table^T + bias` and its
  gradients in features, table and bias, against autodiff through the reference."""
  import tensorflow as tf
  from t2t_lite.training.loss import projected_cross_entropy
  rng = np.random.RandomState(2)
  features = tf.constant(rng.normal(size=(2, 4, 8)).astype("float32"))
  table = tf.constant(rng.normal(size=(13, 8)).astype("float32"))
  bias = tf.Variable(rng.normal(size=(13,)).astype("float32"))
  targets = tf.constant([[4, 2, 12, 0], [1, 3, 5, 7]], tf.int32)

  def values_and_grads(loss_fn):
    with tf.GradientTape() as tape:
      tape.watch([features, table])
      loss, _, nll = loss_fn()
    return (loss, nll) + tuple(tape.gradient(loss, [features, table, bias]))

  expected = values_and_grads(lambda: smoothed_cross_entropy(
      tf.matmul(features, table, transpose_b=True) + bias, targets, 0.1))
  actual = values_and_grads(lambda: projected_cross_entropy(
      features, table, targets, 0.1, compact=compact, row_multiple=4, bias=bias))
  for a, e in zip(actual, expected):
    np.testing.assert_allclose(ops.convert_to_numpy(a), ops.convert_to_numpy(e), rtol=1e-4, atol=1e-5)
  assert np.abs(ops.convert_to_numpy(actual[-1])).max() > 1e-3  # the bias gets a real gradient


def test_projected_loss_under_float16_features_and_changing_shapes():
  import tensorflow as tf
  from t2t_lite.training.loss import projected_cross_entropy
  rng = np.random.RandomState(1)
  table = tf.constant(rng.normal(size=(11, 4)).astype("float32"))
  fn = tf.function(lambda f, t: projected_cross_entropy(f, table, t, 0.1), reduce_retracing=True)
  for batch, length in ((2, 3), (4, 7), (1, 2)):
    features = rng.normal(size=(batch, length, 4)).astype("float32")
    targets = rng.randint(0, 11, (batch, length)).astype("int32")
    expected = smoothed_cross_entropy(features @ table.numpy().T, targets, 0.1)
    for dtype, tol in ((tf.float32, 1e-5), (tf.float16, 2e-2)):
      actual = fn(tf.constant(features, dtype), tf.constant(targets))
      np.testing.assert_allclose([float(a) for a in actual], [float(e) for e in expected], rtol=tol,
                                 atol=tol)
