"""Greedy decoding and sampling: T2T's `beam_size=1` path, driven by the beam search's callback.

One loop (`sampling_loop`) writes one token per step for every sentence of the batch; only the
rule that picks the token differs: the argmax (`greedy_search`), or a draw from the softmax at a
temperature, optionally restricted to the `top_k` most likely tokens (`sampling_search`).

The callback is the one `beam_search` takes, with `batch` in place of `batch * beam`:

    symbols_to_logits_fn(ids [batch] int32, step [] int32, cache) -> (logits [batch, vocab], cache)

`ids` is the last token written (the start token 0 at step 0), `cache` a nested dict of tensors
with the batch on axis 0. An optional constraint (`t2t_lite.decoding.constraints`) masks the
tokens each sentence may write before the token is picked. Everything is `keras.ops` with
buffers preallocated to their final shape, so the loop runs eagerly, inside `tf.function`
(TensorFlow backend, e.g. in an exported SavedModel) and under `jax.jit`.

The cache may grow in phases (`cache_lengths`, `extend_cache`; see `run_phases`, shared with the
beam search): one loop per static cache length, so early steps attend over (and beam search
reorders) a short cache rather than one sized for the longest output.

Example, a "model" that always prefers token 2 and then EOS (1):

    >>> def fn(ids, step, cache):
    ...   table = ops.convert_to_tensor([[0., 0., 5.], [0., 9., 0.], [0., 9., 0.]])
    ...   return ops.take(table, ids, axis=0), cache
    >>> ids, scores = greedy_search(fn, {}, batch_size=1, max_decode_length=4)
    >>> ops.convert_to_numpy(ids)
    array([[2, 1, 0, 0]], dtype=int32)
"""

from typing import Any, NamedTuple

import keras
from keras import ops

from t2t_lite.decoding.constraints import masked_logits
from t2t_lite.decoding.gathers import take_rows
from t2t_lite.layers import checks
from t2t_lite.token_ids import EOS_ID, START_ID

NEG_INF = float("-inf")


class SamplingState(NamedTuple):
  """The loop variables of greedy decoding and sampling."""
  step: Any        # [] int32: tokens written so far
  ids: Any         # [batch, max_decode_length + 1] int32: position 0 holds the start token
  log_probs: Any   # [batch] float32: sum of the model's log-probabilities of the written tokens
  finished: Any    # [batch] bool: wrote EOS or reached its length limit
  cache: Any       # nested dict, each tensor [batch, ...]
  constraint: Any  # the constraint's state, each tensor [batch, ...] ({} without one)


def decode_limits(decode_lengths, batch_size, max_decode_length):
  """Per-sentence maximum output lengths (EOS included), clipped to [1, max_decode_length]."""
  if decode_lengths is None:
    return ops.full((batch_size,), max_decode_length, dtype="int32")  # [batch]
  limits = ops.cast(ops.convert_to_tensor(decode_lengths), "int32")   # [batch]
  return ops.clip(ops.reshape(limits, (batch_size,)), 1, max_decode_length)  # [batch]


def write_at(ids, position, tokens):
  """`ids[..., position] = tokens` for a dynamic scalar `position`, or for a `position` [batch]
  per row (`ids[b, ..., position[b]] = tokens[b, ...]`, a refill search's slots).

  A select rather than `ops.slice_update`, whose TensorFlow kernel is the XLA op
  `XlaDynamicUpdateSlice`: the exported graph keeps to core ops.
  """
  position = ops.convert_to_tensor(position)
  if len(position.shape) == 1:                                         # [batch] -> [batch, 1.., 1]
    position = ops.reshape(position, (-1,) + (1,) * (len(ids.shape) - 1))
  hit = ops.arange(checks.dim(ids, -1), dtype="int32") == position      # [length] or [b, 1.., length]
  return ops.where(hit, ops.expand_dims(tokens, -1), ids)              # [..., length]


def read_at(ids, position):
  """`ids[..., position]` for a scalar `position`, or `ids[b, ..., position[b]]` for a `position`
  [batch] (the inverse of `write_at`)."""
  position = ops.convert_to_tensor(position)
  if len(position.shape) == 0:
    return ops.take(ids, position, axis=-1)                            # [...]
  position = ops.reshape(position, (-1,) + (1,) * (len(ids.shape) - 1))  # [batch, 1.., 1]
  hit = ops.arange(checks.dim(ids, -1), dtype="int32") == position      # [batch, 1.., length]
  return ops.sum(ops.where(hit, ids, ops.zeros_like(ids)), axis=-1)    # [batch, ...]


def next_step(step, done):
  """The step after `step`: +1 for a scalar (the whole batch moves on); per row for a step
  [batch], where the rows that are `done` keep theirs (a refill search's finished slots)."""
  if len(ops.convert_to_tensor(step).shape) == 0:
    return step + 1
  return ops.where(done, step, step + 1)                               # [batch]


FIRST_CACHE_LENGTH = 16


def cache_phases(max_decode_length, first=FIRST_CACHE_LENGTH):
  """The cache lengths a search grows through: `first`, doubling, then `max_decode_length`.

  A length is kept only if the next phase is at least half again as long (no tiny last phase):
  66 -> (16, 32, 66), 114 -> (16, 32, 64, 114), 306 -> (16, 32, 64, 128, 306), 20 -> (20,).
  A tensor `max_decode_length` (a length unknown when the search is traced) gives None: one
  phase, the caller's cache as it is.
  """
  if not isinstance(max_decode_length, int):
    return None
  lengths, length = [], first
  while 3 * length <= 2 * max_decode_length:
    lengths.append(length)
    length *= 2
  return tuple(lengths) + (max_decode_length,)


def check_cache_phases(cache_lengths, extend_cache, max_decode_length):
  """Explains bad `cache_lengths` / `extend_cache` arguments of the searches (see `run_phases`)."""
  if cache_lengths is None:
    return
  lengths = tuple(cache_lengths)
  if (not lengths or not all(isinstance(n, int) and n >= 1 for n in lengths)
      or list(lengths) != sorted(set(lengths))):
    raise ValueError(f"cache_lengths must be increasing Python ints >= 1, got {cache_lengths!r}")
  if not isinstance(max_decode_length, int) or lengths[-1] != max_decode_length:
    raise ValueError(f"cache_lengths must end at max_decode_length (a Python int), got "
                     f"{cache_lengths!r} for {max_decode_length!r}; pass cache_lengths=None for "
                     "one phase")
  if len(lengths) > 1 and extend_cache is None:
    raise ValueError("cache_lengths with more than one phase needs extend_cache(cache, length), "
                     "which grows the cache to the next phase's length")


def run_phases(cond, body, state, cache_lengths=None, extend_cache=None):
  """`ops.while_loop(cond, body, (state,))`, with the cache grown in phases; returns the state.

  `state` is a NamedTuple with `step` and `cache`. Without `cache_lengths`: one loop. With them
  (increasing static lengths, the last the longest output; `state.cache` holds
  `cache_lengths[0]` positions): one loop per length, each running while `cond` holds and the
  step is below its length; between loops `extend_cache(cache, length)` grows the cache to the
  next length (e.g. zeros appended to the self-attention keys and values, which the causal mask
  hides as it hides the preallocated ones). Every step runs the same body on the same state
  except for the cache's length, so the results are those of one loop, while the early steps
  attend over (and beam search reorders) 16, 32, ... positions, not the longest output's.

  The later phases run only while the search goes on (`ops.cond` on `cond`, inside a compiled
  search too): once every sentence is done, the cache is not grown again and no further loop
  starts. The phases end at different cache lengths, so the returned state's cache is `{}`
  (the searches return none of it).
  """
  if cache_lengths is None:
    (state,) = ops.while_loop(cond, body, (state,))
    return state

  def from_phase(state, phase):
    """Runs phases `phase`, `phase + 1`, ... on `state`, whose cache holds the positions of
    phase `phase`."""
    length = cache_lengths[phase]
    (state,) = ops.while_loop(lambda s: (s.step < length) & cond(s), body, (state,))
    done = state._replace(cache={})
    if phase + 1 == len(cache_lengths):
      return done
    grown = lambda: from_phase(  # noqa: E731
        state._replace(cache=extend_cache(state.cache, cache_lengths[phase + 1])), phase + 1)
    return ops.cond(cond(state), grown, lambda: done)

  return from_phase(state, 0)


def log_softmax(logits):
  """Normalised log-probabilities in float32, whatever dtype the model computes in."""
  return ops.log_softmax(ops.cast(logits, "float32"), axis=-1)  # [..., vocab]


def first_argmax(logits):
  """`ops.argmax(logits, axis=-1)` (the first index of the maximum) for float32 [batch, vocab],
  as two plain reductions: the maximum, then the smallest index that holds it.

  XLA on CPU runs `argmax`'s (value, index) reduction one element at a time; a max and a min
  vectorise, and the max is the one `token_log_probs` takes (XLA computes it once). Equal
  maxima give the first index, as `argmax` does, with one exception: -0.0 and 0.0 count as equal
  here, where Keras' argmax ranks 0.0 first. All -inf (every token forbidden) gives 0.
  """
  vocab = checks.dim(logits, -1)
  best = ops.max(logits, axis=-1, keepdims=True)                          # [batch, 1]
  index = ops.arange(vocab, dtype="int32")                                # [vocab]
  return ops.min(ops.where(logits == best, index, vocab), axis=-1)        # [batch]


def token_log_probs(logits, tokens):
  """`log_softmax(logits)[b, tokens[b]]` without writing the [batch, vocab] log-probabilities:
  (logit - max) - log(sum(exp(logits - max))), the terms of TensorFlow's and JAX's log-softmax.

  logits float32 [batch, vocab], tokens int32 [batch] -> float32 [batch].
  """
  best = ops.max(logits, axis=-1)                                         # [batch]
  total = ops.sum(ops.exp(logits - ops.expand_dims(best, -1)), axis=-1)   # [batch]
  chosen = take_rows(logits, ops.expand_dims(tokens, 1))[:, 0]             # [batch]
  return (chosen - best) - ops.log(total)                                 # [batch]


def sampling_step(state, symbols_to_logits_fn, pick_fn, limits, eos_id=EOS_ID, constraint=None):
  """One step of `sampling_loop`: every sentence writes one token (PAD once finished).

  `state.step` is a scalar, or [batch] (each row at its own step: a refill search's slots; a
  finished row keeps its step). `limits` [batch]: each sentence's maximum output length.
  """
  step = state.step                                                    # [] or [batch]
  last_ids = read_at(state.ids, step)                                  # [batch]
  logits, cache = symbols_to_logits_fn(last_ids, step, state.cache)    # [batch, vocab]
  logits = ops.cast(logits, "float32")                                 # [batch, vocab]
  choices = masked_logits(logits, constraint, state.constraint, step)  # [batch, vocab]
  tokens = ops.cast(pick_fn(choices, step), "int32")                   # [batch]
  tokens = ops.where(state.finished, 0, tokens)                        # [batch] PAD after EOS
  written = token_log_probs(logits, tokens)                            # [batch]
  log_probs = state.log_probs + ops.where(state.finished, 0.0, written)  # [batch]
  finished = state.finished | (tokens == eos_id) | (step + 1 >= limits)          # [batch]
  constraint_state = (constraint.update(state.constraint, tokens, step) if constraint is not None
                      else state.constraint)
  return SamplingState(next_step(step, state.finished), write_at(state.ids, step + 1, tokens),
                       log_probs, finished, cache, constraint_state)


def sampling_loop(symbols_to_logits_fn, initial_cache, batch_size, max_decode_length, pick_fn,
                  eos_id=EOS_ID, decode_lengths=None, constraint=None, constraint_state=None,
                  cache_lengths=None, extend_cache=None):
  """Runs the decoding loop and returns the final `SamplingState` (with the number of steps run).

  Args:
    pick_fn: `(logits [batch, vocab] float32, step [] int32) -> tokens [batch] int32`; it gets
      the logits with the tokens the constraint forbids at -inf.
    Other arguments: see `greedy_search`.
  """
  check_cache_phases(cache_lengths, extend_cache, max_decode_length)
  limits = decode_limits(decode_lengths, batch_size, max_decode_length)  # [batch]

  def body(state):
    return (sampling_step(state, symbols_to_logits_fn, pick_fn, limits, eos_id, constraint),)

  def cond(state):
    return (state.step < max_decode_length) & ops.logical_not(ops.all(state.finished))

  state = SamplingState(
      step=ops.convert_to_tensor(0, "int32"),                                       # []
      ids=ops.full((batch_size, max_decode_length + 1), START_ID, dtype="int32"),   # [batch, L+1]
      log_probs=ops.zeros((batch_size,), "float32"),                                # [batch]
      finished=ops.zeros((batch_size,), "bool"),                                    # [batch]
      cache=initial_cache,
      constraint=checked_constraint_state(constraint, constraint_state))
  return run_phases(cond, body, state, cache_lengths, extend_cache)


def checked_constraint_state(constraint, constraint_state):
  if constraint is None:
    return {}
  if constraint_state is None:
    raise ValueError("a constraint needs its initial state: pass constraint_state= "
                     "(constraint.initial_state(...), batch on axis 0)")
  return constraint_state


def _uniform(shape, seed):
  """Uniform numbers in [1e-7, 1): `keras.random.uniform`'s for an int or None `seed`; for a
  scalar integer tensor, the same numbers its int value gives (Keras' key [seed, 0])."""
  if seed is None or isinstance(seed, int):
    return keras.random.uniform(shape, minval=1e-7, maxval=1.0, seed=seed)
  if keras.backend.backend() == "tensorflow":  # keras.random takes no tensor seed there
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    # Keras' int seed: [seed, 0] in int64, folded into int32 (its TensorFlow backend's `_cast_seed`).
    key = tf.stack([tf.cast(seed, tf.int64), tf.constant(0, tf.int64)])
    key = tf.cast(tf.math.floormod(key, tf.int32.max - 1), tf.int32)
    return tf.random.stateless_uniform(shape, seed=key, minval=1e-7, maxval=1.0,
                                       dtype=keras.backend.floatx())
  # JAX takes the key array itself: uint32 [seed, 0], as Keras makes it of an int.
  key = ops.stack([ops.cast(seed, "uint32"), ops.zeros((), "uint32")])
  return keras.random.uniform(shape, minval=1e-7, maxval=1.0, seed=key)


def greedy_search(symbols_to_logits_fn, initial_cache, batch_size, max_decode_length, eos_id=EOS_ID,
                  decode_lengths=None, constraint=None, constraint_state=None, cache_lengths=None,
                  extend_cache=None):
  """Greedy decoding: the most likely token at every step (T2T's `beam_size=1`).

  Args:
    symbols_to_logits_fn: `(ids [batch], step [], cache) -> (logits [batch, vocab], cache)`.
    initial_cache: nested dict of tensors with the batch on axis 0 (may be empty).
    batch_size, max_decode_length: Python ints, or scalar int32 tensors under tf.function.
    eos_id: the end-of-sentence id (T2T: 1).
    decode_lengths: optional int32 [batch]: each sentence's maximum output length, EOS
      included (input length + extra_length); a sentence that reaches it stops there.
    constraint, constraint_state: optional; see `t2t_lite.decoding.constraints`.
    cache_lengths, extend_cache: optional, the cache grown in phases (see `run_phases`):
      increasing Python ints ending at max_decode_length (`initial_cache` holds the first),
      and `extend_cache(cache, length)`, which grows the cache to the next. Same results.

  Returns:
    ids [batch, max_decode_length] int32 (0 after EOS) and scores [batch] float32: the sum of
    the log-probabilities of the written tokens (no length penalty, as in T2T).
  """
  pick = lambda logits, step: first_argmax(logits)  # [batch]
  state = sampling_loop(symbols_to_logits_fn, initial_cache, batch_size, max_decode_length, pick,
                        eos_id, decode_lengths, constraint, constraint_state, cache_lengths,
                        extend_cache)
  return state.ids[:, 1:], state.log_probs  # [batch, L], [batch]


def sampling_search(symbols_to_logits_fn, initial_cache, batch_size, max_decode_length,
                    temperature=1.0, top_k=0, seed=None, eos_id=EOS_ID, decode_lengths=None,
                    constraint=None, constraint_state=None, cache_lengths=None, extend_cache=None):
  """Sampling from the model's distribution at `temperature`, optionally among the `top_k` best.

  `temperature=0` is greedy decoding (T2T's `sampling_temperature=0`). All random numbers are
  drawn before the loop (one uniform number per sentence and step, turned into a token through
  the cumulative distribution), so an int `seed` gives the same samples on every call, inside
  `tf.function` and under `jax.jit` alike; `seed=None` uses Keras's global seed generator (not
  usable under `jax.jit`). `seed` may also be a scalar integer tensor, an argument of the
  compiled search: the samples of that int, from one program for every seed.

  Returns:
    ids [batch, max_decode_length] int32 (0 after EOS) and scores [batch] float32: the sum of
    the model's log-probabilities (temperature 1, all tokens) of the sampled tokens.
  Other arguments: see `greedy_search`.
  """
  if temperature < 0:
    raise ValueError(f"temperature must be >= 0 (0 is greedy decoding), got {temperature}")
  if top_k < 0:
    raise ValueError(f"top_k must be >= 0 (0 keeps all tokens), got {top_k}")
  if temperature == 0:
    return greedy_search(symbols_to_logits_fn, initial_cache, batch_size, max_decode_length,
                         eos_id, decode_lengths, constraint, constraint_state, cache_lengths,
                         extend_cache)
  uniform = _uniform((max_decode_length, batch_size), seed)               # [L, batch]

  def pick(logits, step):
    logits = logits / temperature                                        # [batch, vocab]
    if top_k:
      kth_best = ops.top_k(logits, top_k)[0][:, -1:]                     # [batch, 1]
      logits = ops.where(logits < kth_best, NEG_INF, logits)             # [batch, vocab]
    cdf = ops.cumsum(ops.softmax(logits, axis=-1), axis=-1)              # [batch, vocab]
    target = ops.take(uniform, step, axis=0)[:, None] * cdf[:, -1:]      # [batch, 1]
    tokens = ops.sum(ops.cast(cdf < target, "int32"), axis=-1)           # [batch]
    return ops.minimum(tokens, checks.dim(logits, -1) - 1)                # [batch]

  state = sampling_loop(symbols_to_logits_fn, initial_cache, batch_size, max_decode_length, pick,
                        eos_id, decode_lengths, constraint, constraint_state, cache_lengths,
                        extend_cache)
  return state.ids[:, 1:], state.log_probs  # [batch, L], [batch]
