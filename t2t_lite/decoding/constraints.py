"""Constrained decoding: a per-hypothesis state and a mask on the logits, for every search.

A constraint is any object with three methods, all `keras.ops` (so it runs inside the XLA loop,
a SavedModel graph and `jax.jit`):

    initial_state(...)            -> state: a nested dict of tensors, batch on axis 0
    allowed(state, step)          -> bool [batch, vocab]: the tokens the state may write at `step`
                                     (a scalar, or [batch]: each row at its own step)
    update(state, tokens, step)   -> the state after writing `tokens` (int [batch]) at `step`

The searches (`greedy_search`, `sampling_search`, `beam_search`) take `constraint=` and
`constraint_state=` (the initial state, [batch, ...]). Beam search tiles the state to the beams
and reorders it with them, exactly as it does the model's cache. At every step the logits of
tokens the state does not allow are set to -inf before the candidates are ranked (the argmax,
the sample, or beam search's top-k); scores stay the model's own log-probabilities of the
written tokens (the mask removes candidates, it does not renormalise the others), so a
constrained output scores what the model gives that sequence. `allowed` must leave at least one
token for every state the search can reach.

Two constraints ship: `ForcedPrefix` (below: every output starts with given tokens) and
`t2t_lite.parsing.constraint.TreeConstraint` (parsing: one well-formed tree over the input).

Example, forcing the first two tokens of every output:

    >>> constraint = ForcedPrefix(vocab_size=8)
    >>> state = constraint.initial_state(np.array([[5, 6], [7, 0]]))    # [batch, P], 0-padded
    >>> ids, scores = greedy_search(fn, {}, batch_size=2, max_decode_length=10,
    ...                             constraint=constraint, constraint_state=state)
"""

from keras import ops

from t2t_lite.decoding.gathers import gather, take_rows
from t2t_lite.token_ids import PAD_ID


class ForcedPrefix:
  """Every output starts with a given prefix of tokens; free afterwards.

  Args:
    vocab_size: V.
  The prefixes are the state: `initial_state(prefix_ids)` with int [batch, P], padded with 0
  (PAD) after each sentence's prefix (PAD is never a real output token).
  """

  def __init__(self, vocab_size):
    self.vocab_size = vocab_size

  def initial_state(self, prefix_ids):
    prefix_ids = ops.cast(ops.convert_to_tensor(prefix_ids), "int32")           # [b, P]
    lengths = ops.sum(ops.cast(ops.not_equal(prefix_ids, PAD_ID), "int32"), axis=1)  # [b]
    return {"prefix": prefix_ids, "length": lengths}

  def allowed(self, state, step):
    prefix = state["prefix"]                                                     # [b, P]
    step = ops.cast(step, "int32")                                               # [] or [b]
    position = ops.minimum(step, ops.shape(prefix)[1] - 1)
    if len(position.shape) == 1:  # a step per row (a refill search's slots)
      forced = take_rows(prefix, position[:, None])[:, 0]                        # [b]
    else:
      forced = gather(prefix, position, axis=1)                                  # [b]
    vocab = ops.arange(self.vocab_size, dtype="int32")[None, :]                  # [1, V]
    free = (step >= state["length"])[:, None]                                    # [b, 1]
    return free | ops.equal(vocab, forced[:, None])                              # [b, V]

  def update(self, state, tokens, step):
    del tokens, step
    return state


def masked_logits(logits, constraint, state, step):
  """`logits` with the tokens `state` does not allow at -inf (float32 [batch, vocab])."""
  logits = ops.cast(logits, "float32")
  if constraint is None:
    return logits
  return ops.where(constraint.allowed(state, step), logits, float("-inf"))
