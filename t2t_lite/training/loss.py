"""Label-smoothed cross entropy over non-padding tokens (paper section 5.4, T2T's convention).

With smoothing eps over a vocabulary of V, the target distribution puts `1 - eps` on the true
token and `eps / (V - 1)` on each other one. Its cross entropy against log-probabilities `logp`
needs no one-hot tensor of vocabulary size:

    CE = -(1 - eps) * logp[y] - eps / (V - 1) * (sum(logp) - logp[y])

T2T subtracts the entropy of that target distribution so that a perfect model scores 0; we do
the same, so reported losses are comparable with T2T's.
"""

import functools
import math

from keras import ops

from t2t_lite.token_ids import PAD_ID


def smoothed_target(label_smoothing, vocab_size):
  """(confidence, low, entropy) of the smoothed target distribution over `vocab_size` tokens:
  `1 - eps` on the true token, `eps / (V - 1)` on each other one, and its entropy (which T2T
  subtracts so that a perfect model scores 0)."""
  confidence = 1.0 - label_smoothing
  low = label_smoothing / (vocab_size - 1.0)
  entropy = -(confidence * math.log(confidence) + (vocab_size - 1.0) * low * math.log(low + 1e-20))
  return confidence, low, entropy


def smoothed_cross_entropy(logits, targets, label_smoothing=0.1, pad_id=PAD_ID):
  """Sum of per-token losses and the number of real (non-pad) tokens.

  Args:
    logits: [batch, length, vocab], any float dtype (computed in float32).
    targets: [batch, length] int ids, `pad_id` where padded.
  Returns:
    (loss_sum, token_count, nll_sum): float32 scalars. `nll_sum` is the unsmoothed negative
    log-likelihood, for perplexity.
  """
  logits = ops.cast(logits, "float32")
  log_probs = ops.log_softmax(logits, axis=-1)                          # [B, T, V]
  true_log_prob = ops.squeeze(
      ops.take_along_axis(log_probs, ops.expand_dims(ops.cast(targets, "int32"), -1), axis=-1),
      -1)                                                               # [B, T]
  weights = ops.cast(ops.not_equal(targets, pad_id), "float32")         # [B, T]
  nll = -true_log_prob
  if label_smoothing > 0:
    confidence, low, entropy = smoothed_target(label_smoothing, logits.shape[-1])
    sum_log_probs = ops.sum(log_probs, axis=-1)                         # [B, T]
    loss = -confidence * true_log_prob - low * (sum_log_probs - true_log_prob) - entropy
  else:
    loss = nll
  return ops.sum(loss * weights), ops.sum(weights), ops.sum(nll * weights)


# ---------------------------------------------------------------------------- the training kernel


def fast_smoothed_cross_entropy(logits, targets, label_smoothing=0.1, pad_id=PAD_ID):
  """`smoothed_cross_entropy` for TensorFlow training: the same three values, with a faster
  gradient (`python scripts/bench_train.py --loss` times both; docs/performance.md).

  The loss is memory-bound (it reads [tokens, vocab] logits a few times and writes their
  gradient), so the win is in touching that tensor less:
  - a hand-written gradient, `weights * (softmax - smoothed one-hot)`, written in one pass
    instead of autodiff's chain through log_softmax, gather and sum;
  - XLA fuses each side into a couple of loops; it compiles once per logits shape (a few hundred
    ms; the length buckets give at most ~40 shapes per run).

  Args and returns: as `smoothed_cross_entropy` (logits [batch, length, vocab], targets
  [batch, length]); returns (loss_sum, token_count, nll_sum), float32 scalars. Differentiable
  in `logits` through loss_sum and nll_sum.
  """
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  vocab_size = logits.shape[-1]
  flat_logits = tf.reshape(tf.cast(logits, tf.float32), [-1, vocab_size])       # [N, V]
  flat_targets = tf.reshape(tf.cast(targets, tf.int32), [-1])                   # [N]
  weights = tf.cast(tf.not_equal(flat_targets, pad_id), tf.float32)             # [N]
  loss_sum, nll_sum = _loss_sums(float(label_smoothing), vocab_size)(flat_logits, flat_targets,
                                                                     weights)
  return loss_sum, tf.reduce_sum(weights), nll_sum


def _token_losses(logits, log_z, targets, label_smoothing, vocab, logit_sums=None):
  """Per-token (nll, smoothed loss) [N] from TF logits [N, V] and their log-partition log_z [N]:
  the forward of both XLA kernels below (each computes log_z its own way). `logit_sums` [N],
  each row's sum of logits if known (else summed here, a pass over the logits)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  nll = log_z - tf.gather(logits, targets[:, None], batch_dims=1)[:, 0]           # -logp[y]
  if label_smoothing <= 0:
    return nll, nll
  confidence, low, entropy = smoothed_target(label_smoothing, vocab)
  if logit_sums is None:
    logit_sums = tf.reduce_sum(logits, -1)
  sum_log_probs = logit_sums - vocab * log_z                                     # sum_j logp[j]
  return nll, confidence * nll - low * (sum_log_probs + nll) - entropy


@functools.cache
def _loss_sums(label_smoothing, vocab):
  """The XLA-compiled `(logits [N, V], targets [N], weights [N]) -> (loss_sum, nll_sum)`.

  One function per (label_smoothing, vocab): with reduce_retracing the traced logits shape
  becomes [None, None] once N varies, so V is passed here as a Python int.
  """
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from t2t_lite.graph_functions import graph_function  # pylint: disable=import-outside-toplevel
  eps = label_smoothing
  confidence, low, _ = smoothed_target(eps, vocab) if eps > 0 else (1.0, 0.0, 0.0)

  @tf.custom_gradient
  def sums(logits, targets, weights):
    top = tf.stop_gradient(tf.reduce_max(logits, axis=-1, keepdims=True))    # [N, 1]
    log_z = tf.math.log(tf.reduce_sum(tf.exp(logits - top), -1, keepdims=True)) + top  # [N, 1]
    nll, loss = _token_losses(logits, log_z[:, 0], targets, eps, vocab)       # [N], [N]

    def grad(d_loss, d_nll):
      # d loss / d logits = softmax - target distribution (low off the true token, confidence
      # on it); d nll / d logits = softmax - one_hot.
      d_loss = tf.zeros([]) if d_loss is None else d_loss
      d_nll = tf.zeros([]) if d_nll is None else d_nll
      probs = tf.exp(logits - log_z)                                          # [N, V]
      scale = weights * (d_loss + d_nll)                                      # [N]
      on_true = weights * (d_loss * (confidence - low) + d_nll)               # [N]
      one_hot = tf.one_hot(targets, vocab, dtype=tf.float32)                  # fused by XLA
      d_logits = (probs * scale[:, None] - (weights * d_loss * low)[:, None]
                  - one_hot * on_true[:, None])
      return d_logits, None, None

    return (tf.reduce_sum(loss * weights), tf.reduce_sum(nll * weights)), grad

  return graph_function(sums, jit_compile=True, reduce_retracing=True)


def projected_cross_entropy(decoder_output, table, targets, label_smoothing=0.1, pad_id=PAD_ID,
                            compact=True, row_multiple=128, bias=None, rdrop_alpha=0.0):
  """`smoothed_cross_entropy(decoder_output @ table^T, targets)` for TensorFlow training: the
  pre-softmax projection and the loss in one differentiable function, faster with its gradients
  than the projection followed by `fast_smoothed_cross_entropy` (`python scripts/bench_train.py
  --loss`; docs/performance.md).

  - With `compact=True`, only real tokens are projected: padded positions are dropped before
    the [tokens, d] x [d, V] matmul (rows are then padded to a multiple of `row_multiple` with
    zero weight, so the XLA kernel compiles for a bounded set of shapes). A function compiled
    whole by XLA (`xla_compile`) needs static shapes: pass `compact=False` there.
  - One XLA kernel reads the logits once and writes both the loss and its gradient with respect
    to the logits (`weights * (softmax - smoothed one-hot)`); the backward pass is then two
    matmuls, scaled on their small outputs.

  Args:
    decoder_output: [batch, length, d] (`Transformer.decoder_output`), any float dtype.
    table: [V, d] the shared embedding matrix; the matmuls run in `decoder_output`'s dtype, the
      softmax in float32.
    targets: [batch, length] int ids, `pad_id` where padded.
    bias: optional [V] logits bias (a model with `logits_bias`): the logits are
      `decoder_output @ table^T + bias`.
    rdrop_alpha: > 0 for R-Drop (hparam `rdrop_alpha`): the batch holds the same pairs twice
      (rows i and B/2 + i), and the loss gains rdrop_alpha / 2 times the sum over the real
      tokens of the symmetric KL divergence between the two halves' predictions; its gradient
      joins the cross entropy's in the same [2R, V] buffer, so the backward pass keeps its two
      matmuls (`_rdrop_kl_and_gradient`).
  Returns:
    (loss_sum, token_count, nll_sum), float32 scalars, as `smoothed_cross_entropy` (with R-Drop,
    over both halves' tokens). Only `loss_sum` is differentiable (in `decoder_output`, `table`
    and `bias`); `nll_sum` is a metric.
  """
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  vocab_size = table.shape[0]
  if rdrop_alpha > 0:  # both halves at the first half's real positions, a's rows then b's
    half = tf.shape(decoder_output)[0] // 2
    flat_targets = tf.reshape(tf.cast(targets[:half], tf.int32), [-1])
    take, weights, count = _scored_rows(flat_targets, pad_id, compact, row_multiple)
    row_targets = tf.tile(take(flat_targets), [2])
    rows = tf.concat(_flat_rows(take, decoder_output[:half], decoder_output[half:]), axis=0)
    half_weights, weights, count = weights, tf.tile(weights, [2]), 2 * count
  else:
    flat_targets = tf.reshape(tf.cast(targets, tf.int32), [-1])                  # [N]
    take, weights, count = _scored_rows(flat_targets, pad_id, compact, row_multiple)
    row_targets, (rows,) = take(flat_targets), _flat_rows(take, decoder_output)
  kernel = _loss_and_gradient(float(label_smoothing), vocab_size)
  nll = []

  @tf.custom_gradient
  def project_and_score(rows, table, *bias):
    weights_t = tf.cast(table, rows.dtype)
    logits = tf.matmul(rows, weights_t, transpose_b=True)                        # [R, V]
    if bias:
      logits = tf.cast(logits, tf.float32) + tf.cast(bias[0], tf.float32)
    # Each row's sum of logits, rows @ sum_j table[j] (+ sum(bias)): a [R, d] x [d] product
    # instead of a pass over the [R, V] logits (the smoothed loss's value needs it, its gradient
    # does not).
    logit_sums = tf.linalg.matvec(tf.cast(rows, tf.float32),
                                  tf.reduce_sum(tf.cast(table, tf.float32), 0))  # [R]
    if bias:
      logit_sums += tf.reduce_sum(tf.cast(bias[0], tf.float32))
    loss_sum, nll_sum, d_logits = kernel(logits, row_targets, weights, logit_sums)
    nll.append(nll_sum)
    if rdrop_alpha > 0:
      kl_sum, d_kl = _rdrop_kl_and_gradient()(logits, half_weights)
      loss_sum += rdrop_alpha / 2 * kl_sum
      d_logits += rdrop_alpha / 2 * d_kl

    def grad(d_loss):
      d = tf.cast(d_logits, rows.dtype)
      d_rows = tf.matmul(d, weights_t) * tf.cast(d_loss, rows.dtype)
      d_table = tf.matmul(d, rows, transpose_a=True) * tf.cast(d_loss, rows.dtype)
      d_bias = [tf.cast(tf.reduce_sum(d_logits, 0) * d_loss, bias[0].dtype)] if bias else []
      return (d_rows, tf.cast(d_table, table.dtype), *d_bias)

    return loss_sum, grad

  loss_sum = project_and_score(rows, table, *([] if bias is None else [bias]))
  return loss_sum, tf.cast(count, tf.float32), tf.stop_gradient(nll[0])


def _scored_rows(flat_targets, pad_id, compact, row_multiple):
  """(take, weights [R], count) for the positions a loss scores among flat_targets [N]: with
  `compact`, `take` gathers the real (non-pad) positions' rows, padded to a multiple of
  `row_multiple` with zero weight; otherwise it keeps all N rows, padded ones at weight 0."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  if not compact:
    weights = tf.cast(tf.not_equal(flat_targets, pad_id), tf.float32)            # [N]
    return (lambda t: t), weights, tf.reduce_sum(weights)
  real = tf.where(tf.not_equal(flat_targets, pad_id))[:, 0]                      # [M]
  count = tf.shape(real)[0]
  rows_padded = (count + row_multiple - 1) // row_multiple * row_multiple
  index = tf.pad(real, [[0, rows_padded - count]])                               # [R]
  weights = tf.cast(tf.range(rows_padded) < count, tf.float32)                   # [R]
  return (lambda t: tf.gather(t, index)), weights, count


def _flat_rows(take, *outputs):
  """Each [batch, length, d] of `outputs` as the [R, d] rows `take` keeps."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  return [take(tf.reshape(t, [-1, t.shape[-1]])) for t in outputs]


@functools.cache
def _rdrop_kl_and_gradient():
  """The XLA-compiled `(logits [2R, V], weights [R]) -> (sum_i weights_i * (KL(p_a || p_b) +
  KL(p_b || p_a)), its gradient with respect to logits [2R, V])`, copy a in rows :R and copy b
  in rows R:. With la = log p_a, lb = log p_b, the term of a row is sum_v (p_a - p_b)(la - lb),
  and its gradient in a's logits p_a * (la - lb - KL(p_a || p_b)) + p_a - p_b (b's alike)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from t2t_lite.graph_functions import graph_function  # pylint: disable=import-outside-toplevel

  def kernel(logits, weights):
    logits = tf.cast(logits, tf.float32)
    rows = tf.shape(logits)[0] // 2
    log_p = logits - tf.reduce_logsumexp(logits, axis=-1, keepdims=True)
    log_a, log_b = log_p[:rows], log_p[rows:]
    p_a, p_b = tf.exp(log_a), tf.exp(log_b)
    diff = log_a - log_b
    kl_ab = tf.reduce_sum(p_a * diff, -1, keepdims=True)                         # [R, 1]
    kl_ba = -tf.reduce_sum(p_b * diff, -1, keepdims=True)
    w = weights[:, None]
    d_a = w * (p_a * (diff - kl_ab) + p_a - p_b)
    d_b = w * (p_b * (-diff - kl_ba) + p_b - p_a)
    return tf.reduce_sum((kl_ab + kl_ba) * w), tf.concat([d_a, d_b], axis=0)

  return graph_function(kernel, jit_compile=True, reduce_retracing=True)


@functools.cache
def _loss_and_gradient(label_smoothing, vocab):
  """The XLA-compiled `(logits [R, V], targets [R], weights [R], logit_sums [R]) -> (loss_sum,
  nll_sum, d loss_sum / d logits [R, V])`, one function per (label_smoothing, vocab).
  `logit_sums` (each row's sum of logits, for the smoothed loss's value only: the gradient does
  not need it) comes from the caller, who has it without a pass over the logits."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from t2t_lite.graph_functions import graph_function  # pylint: disable=import-outside-toplevel
  eps = label_smoothing
  confidence, low, _ = smoothed_target(eps, vocab) if eps > 0 else (1.0, 0.0, 0.0)

  def kernel(logits, targets, weights, logit_sums):
    logits = tf.cast(logits, tf.float32)
    top = tf.reduce_max(logits, axis=-1, keepdims=True)                           # [R, 1]
    exp = tf.exp(logits - top)
    total = tf.reduce_sum(exp, -1, keepdims=True)
    log_z = tf.math.log(total)[:, 0] + top[:, 0]                                  # [R]
    nll, loss = _token_losses(logits, log_z, targets, eps, vocab, logit_sums)     # [R], [R]
    one_hot = tf.one_hot(targets, vocab, dtype=tf.float32)
    d_logits = weights[:, None] * (exp / total - low - one_hot * (confidence - low))
    return tf.reduce_sum(loss * weights), tf.reduce_sum(nll * weights), d_logits

  return graph_function(kernel, jit_compile=True, reduce_retracing=True)
