"""The fused pre-softmax projection + label-smoothed loss (`projected_cross_entropy`) against a
float64 NumPy reference: the loss, the unsmoothed NLL and the gradients in the features, the
table and a logits bias, written out in closed form (softmax minus the smoothed one-hot target).

Its kernel takes each row's sum of logits as `rows @ sum_j table[j]` (no pass over the logits),
computes the exponentials once for the loss and its gradient and never builds a one-hot
tensor; these tests pin that to the reference at a vocabulary wide enough for the sums to
matter, with logits large enough that the row maximum matters
(tests/test_schedule_and_loss.py checks it against autodiff of the keras.ops loss)."""

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.training.loss import projected_cross_entropy


def reference(features, table, targets, eps, bias=None):
  """(loss sum, token count, nll sum, d loss/d features, d loss/d table, d loss/d bias) in float64."""
  x = features.reshape(-1, features.shape[-1]).astype(np.float64)
  y = targets.reshape(-1)
  e = table.astype(np.float64)
  logits = x @ e.T + (0.0 if bias is None else bias.astype(np.float64))
  v = logits.shape[-1]
  shifted = logits - logits.max(-1, keepdims=True)
  logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
  target = np.full(logits.shape, eps / (v - 1))
  target[np.arange(len(y)), y] = 1 - eps
  entropy = -(target * np.log(target)).sum(-1) if eps > 0 else 0.0
  weights = (y != 0).astype(np.float64)
  loss = (-(target * logp).sum(-1) - entropy) * weights
  nll = -logp[np.arange(len(y)), y] * weights
  d_logits = (np.exp(logp) - target) * weights[:, None]
  return (loss.sum(), weights.sum(), nll.sum(), (d_logits @ e).reshape(features.shape),
          d_logits.T @ x, d_logits.sum(0))


def batch(vocab, depth, seed, scale):
  rng = np.random.default_rng(seed)
  features = (rng.normal(size=(4, 6, depth)) * scale).astype("float32")
  # A table of mean 0.5: each row's sum of logits is then in the thousands, so the smoothed
  # loss's term in it (eps / (V - 1) times the sum) is far above the tolerance.
  table = (rng.normal(size=(vocab, depth)) + 0.5).astype("float32")
  targets = rng.integers(1, vocab, size=(4, 6)).astype("int32")
  targets[1, 2:] = 0
  targets[3, 5:] = 0
  return features, table, targets


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("compact,jit", [(True, False), (False, True)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_projected_loss_and_gradients_equal_the_float64_reference(eps, compact, jit, with_bias):
  """Vocabulary 997, logits up to about +-60 (the row maximum keeps exp finite), padding: as the
  trainer calls it in a graph (compact) and inside a whole XLA step (jit, padding kept)."""
  features, table, targets = batch(997, 16, seed=3, scale=4.0)
  bias = ((np.random.default_rng(4).normal(size=(997,)) + 1.0).astype("float32")
          if with_bias else None)  # mean 1: its sum, in every row's sum of logits, matters too
  expected = reference(features, table, targets, eps, bias)
  f, t = tf.constant(features), tf.constant(table)
  b = tf.constant(bias) if with_bias else None

  def run():
    with tf.GradientTape() as tape:
      tape.watch([f, t] + ([b] if with_bias else []))
      loss, count, nll = projected_cross_entropy(f, t, tf.constant(targets), eps, compact=compact,
                                                 row_multiple=8, bias=b)
    grads = tape.gradient(loss, [f, t] + ([b] if with_bias else []))
    return [loss, count, nll] + grads

  actual = [np.asarray(a, np.float64) for a in tf.function(run, jit_compile=jit or None)()]
  assert np.abs(expected[3]).max() > 1e-2 and expected[0] > 100  # gradients and losses not trivial
  for name, a, e in zip(["loss", "count", "nll", "d_features", "d_table", "d_bias"], actual, expected):
    scale = max(np.abs(e).max(), 1.0)
    np.testing.assert_allclose(a, e, rtol=2e-5, atol=2e-5 * scale, err_msg=name)
  # Padded positions get no gradient.
  np.testing.assert_array_equal(actual[3][1, 2:], 0.0)
  np.testing.assert_array_equal(actual[3][3, 5:], 0.0)
