"""Label-smoothed cross entropy over non-padding tokens (paper section 5.4, T2T's convention).

With smoothing eps over a vocabulary of V, the target distribution puts `1 - eps` on the true
token and `eps / (V - 1)` on each other one. Its cross entropy against log-probabilities `logp`
needs no one-hot tensor of vocabulary size:

    CE = -(1 - eps) * logp[y] - eps / (V - 1) * (sum(logp) - logp[y])

T2T subtracts the entropy of that target distribution so that a perfect model scores 0; we do
the same, so reported losses are comparable with T2T's.
"""

import math

from keras import ops


def smoothed_cross_entropy(logits, targets, label_smoothing=0.1, pad_id=0):
  """Sum of per-token losses and the number of real (non-pad) tokens.

  Args:
    logits: [batch, length, vocab], any float dtype (computed in float32).
    targets: [batch, length] int ids, `pad_id` where padded.
  Returns:
    (loss_sum, token_count, nll_sum): float32 scalars. `nll_sum` is the unsmoothed negative
    log-likelihood, for perplexity.
  """
  logits = ops.cast(logits, "float32")
  vocab_size = ops.shape(logits)[-1]
  log_probs = ops.log_softmax(logits, axis=-1)                          # [B, T, V]
  true_log_prob = ops.squeeze(
      ops.take_along_axis(log_probs, ops.expand_dims(ops.cast(targets, "int32"), -1), axis=-1),
      -1)                                                               # [B, T]
  weights = ops.cast(ops.not_equal(targets, pad_id), "float32")         # [B, T]
  nll = -true_log_prob
  if label_smoothing > 0:
    confidence = 1.0 - label_smoothing
    low = label_smoothing / (ops.cast(vocab_size, "float32") - 1.0)
    sum_log_probs = ops.sum(log_probs, axis=-1)                         # [B, T]
    loss = -confidence * true_log_prob - low * (sum_log_probs - true_log_prob)
    normalizer = -(confidence * math.log(confidence) +
                   (ops.cast(vocab_size, "float32") - 1.0) * low * ops.log(low + 1e-20))
    loss = loss - normalizer
  else:
    loss = nll
  return ops.sum(loss * weights), ops.sum(weights), ops.sum(nll * weights)
