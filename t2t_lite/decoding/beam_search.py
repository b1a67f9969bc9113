"""Beam search with GNMT's length penalty (paper section 6.1; T2T's `utils/beam_search.py`).

Pure functions over an explicit `BeamState`, written with `keras.ops` only, with buffers
preallocated to their final shape (no shape changes from step to step), so the same code runs
eagerly, inside `tf.function` (e.g. in an exported SavedModel, where batch and length may be
unknown) and under `jax.jit`. The cache alone may grow, in phases (`cache_lengths`; see
`sampling.run_phases`): one loop per static length. The model is reached through one callback:

    symbols_to_logits_fn(ids [batch * beam] int32, step [] int32, cache)
        -> (logits [batch * beam, vocab], new_cache)

`ids` is each hypothesis's last token (the start token 0 at step 0); `cache` is a nested dict of
tensors with `batch * beam` on axis 0 (sentence-major: the beams of sentence 0 come first),
reordered with the beams every step (`gather_beams`), unless the caller says how the cache follows
the beams (`reorder_cache`: e.g. a cache the beams of a sentence share, where only a small lineage
is reordered; see `translator.make_search_fn`). An optional constraint
(`t2t_lite.decoding.constraints`) carries a state per hypothesis, reordered with the beams like
the cache, and masks the tokens each hypothesis may write before the top-k.

The algorithm (T2T's):
- Two sets per sentence: `beam` alive hypotheses (no EOS yet) and `beam` finished ones (ended by
  EOS). Each step grows the alive ones by one token and keeps the 2 * beam best candidates, so
  even if `beam` of them end in EOS, `beam` candidates remain to stay alive.
- Finished hypotheses are ranked by `log_prob / ((5 + length) / 6) ** alpha` (GNMT; `length`
  counts the EOS); alive ones by their log-probability.
- A sentence stops early when even the best alive hypothesis, scored with the largest length
  penalty it could still get, cannot beat the lowest-scoring finished one (T2T's `_is_finished`
  bound, here per sentence), or when it has reached its own length limit (`decode_lengths`). Its
  state is then frozen, so a sentence's result does not depend on the other sentences of its batch.
  When only the best hypothesis is wanted (`best_only`: T2T decodes with
  `stop_early=(top_beams == 1)`), the bound is checked against the best finished one instead:
  the best is then final, and the search stops sooner (most at large alpha); the other slots hold
  what the search had when it stopped.
- Optionally (`stop_when_finished`, decode hparam `beam_stop=finished`), a sentence also stops as
  soon as `beam` of its hypotheses have ended among the `beam` best candidates of their step,
  CTranslate2's rule with a length penalty (patience 1). (Counting those among all 2 * beam
  candidates, which fills the finished set, stopped far too soon at alpha 1.2: docs/performance.md.)
  Not exact: a hypothesis still alive could have ended later with a better score; the search
  stops sooner, most at large alpha and long limits, where the bound is loose.
- Output slots that no finished hypothesis filled hold the best alive hypotheses, scored by their
  raw log-probability (T2T returns the alive ones when a sentence finishes none).

Example (scripted logits; see tests/test_beam_search.py for more):

    >>> ids, scores = beam_search(fn, {}, batch_size=1, beam_size=4, vocab_size=5,
    ...                           max_decode_length=10)   # ids [1, 4, 10], scores [1, 4]
"""

from typing import Any, NamedTuple

import keras
from keras import ops

from t2t_lite.decoding import shrinking
from t2t_lite.decoding.gathers import gather, take_rows
from t2t_lite.decoding.sampling import (NEG_INF, check_cache_phases, checked_constraint_state,
                                        decode_limits, greedy_search, next_step, read_at,
                                        run_phases, write_at)
from t2t_lite.layers import checks
from t2t_lite.token_ids import EOS_ID, START_ID


class BeamState(NamedTuple):
  """The loop variables of the beam search."""
  step: Any              # [] int32: tokens decoded so far ([batch]: per sentence, see `grow`)
  alive_ids: Any         # [batch, beam, max_decode_length + 1] int32; position 0: start token
  alive_log_probs: Any   # [batch, beam] float32; -inf for an empty slot
  finished_ids: Any      # [batch, beam, max_decode_length + 1] int32
  finished_scores: Any   # [batch, beam] float32: length-penalised; -inf for an empty slot
  done: Any              # [batch] bool: this sentence's search is over (its state is frozen)
  ended: Any             # [batch] int32: hypotheses that ended among a step's beam best candidates
  cache: Any             # nested dict, each tensor [batch * beam, ...]
  constraint: Any        # the constraint's state, each tensor [batch * beam, ...] ({} if none)


def length_penalty(length, alpha):
  """GNMT's `((5 + length) / 6) ** alpha` (Wu et al. 2016, eq. 14)."""
  return ops.power((5.0 + ops.cast(length, "float32")) / 6.0, alpha)


# ---------------------------------------------------------------------------- cache helpers


def tile_to_beams(tree, beam_size):
  """Repeats each [batch, ...] tensor of a nested structure beam_size times: [batch*beam, ...]."""
  return keras.tree.map_structure(lambda t: ops.repeat(t, beam_size, axis=0), tree)


def flat_beam_indices(beam_indices, beam_size):
  """Beam indices [batch, k] (per sentence) -> row indices [batch * k] into [batch * beam, ...]."""
  batch = checks.dim(beam_indices, 0)
  offsets = ops.arange(batch, dtype="int32")[:, None] * beam_size      # [batch, 1]
  return ops.reshape(ops.cast(beam_indices, "int32") + offsets, (-1,))  # [batch * k]


def gather_beams(tree, beam_indices, beam_size):
  """Picks beams of every [batch * beam, ...] tensor of a nested structure (e.g. the cache).

  Args:
    tree: nested structure of tensors [batch * beam_size, ...].
    beam_indices: int [batch, k]: for each sentence and new slot, the old beam to copy.
    beam_size: the number of beams per sentence in `tree`.

  Returns:
    The same structure with tensors [batch * k, ...].
  """
  rows = flat_beam_indices(beam_indices, beam_size)                    # [batch * k]
  return keras.tree.map_structure(lambda t: gather(t, rows), tree)


def _keep_done(done, old, new):
  """Sentences already done keep their old value. done [batch]; old, new [batch, ...]."""
  done = ops.reshape(done, (-1,) + (1,) * (len(old.shape) - 1))        # [batch, 1, ...]
  return ops.where(done, old, new)                                     # [batch, ...]


# ---------------------------------------------------------------------------- the search


def init_state(initial_cache, batch_size, beam_size, max_decode_length, constraint_state=None,
               tile_cache=True):
  """The state before the first step: one alive hypothesis (the start token) per sentence.

  `initial_cache` [batch, ...] is tiled to the beams; with `tile_cache=False` it is kept as it is
  (a cache laid out for the beams by the caller, see `beam_search`'s `reorder_cache`)."""
  first_beam_only = ops.convert_to_tensor([[0.0] + [NEG_INF] * (beam_size - 1)])  # [1, beam]
  ids_shape = (batch_size, beam_size, max_decode_length + 1)
  return BeamState(
      step=ops.convert_to_tensor(0, "int32"),                                   # []
      alive_ids=ops.full(ids_shape, START_ID, dtype="int32"),                   # [batch, beam, L+1]
      alive_log_probs=ops.tile(first_beam_only, (batch_size, 1)),               # [batch, beam]
      finished_ids=ops.full(ids_shape, START_ID, dtype="int32"),                # [batch, beam, L+1]
      finished_scores=ops.full((batch_size, beam_size), NEG_INF, "float32"),    # [batch, beam]
      done=ops.zeros((batch_size,), "bool"),                                    # [batch]
      ended=ops.zeros((batch_size,), "int32"),                                  # [batch]
      cache=(tile_to_beams(initial_cache, beam_size) if tile_cache
             else initial_cache),                                               # [batch*beam, ...]
      constraint=tile_to_beams(constraint_state or {}, beam_size))              # [batch*beam, ...]


def _chunk_size(n, preferred=128):
  """A divisor of n in [preferred / 2, 2 * preferred], the closest to `preferred` (so no padding
  copy is needed), else `preferred`."""
  divisors = [d for d in range(preferred // 2, 2 * preferred + 1) if n % d == 0]
  return min(divisors, key=lambda d: abs(d - preferred)) if divisors else preferred


def top_candidates(logits, alive_log_probs, k, chunk=None, mask=None):
  """The k best of `log_softmax(logits) + alive_log_probs` over every beam's vocabulary.

  Args:
    logits: [batch, beam, vocab] (any float dtype; scored in float32).
    alive_log_probs: [batch, beam] float32, each beam's log-probability so far (-inf: empty).
    k: how many candidates per sentence.
    chunk: the size of the vocabulary chunks of the search; default: a divisor of the
      vocabulary size near 128 (8000: 125; 32000: 128), so the logits need no padded copy.
    mask: optional bool [batch, beam, vocab]: only these tokens are candidates (a decoding
      constraint); scores are still the unmasked log-probabilities.

  Returns:
    (scores [batch, k] float32, flat indices [batch, k] into beam * vocab), as
    `ops.top_k(ops.reshape(log_softmax(logits) + alive_log_probs[..., None], (batch, -1)), k)`
    with the masked-out candidates at -inf.

  The [batch, beam * vocab] scores are never materialised. A candidate's score is
  `((logit - max) - log(sum(exp(logit - max)))) + alive`, computed in the same order as
  `log_softmax` and then the sum, so the values are the same; for a fixed beam it is a
  non-decreasing function of the logit, so the best score of a vocabulary chunk is the score of
  its largest logit. The k best candidates lie in the k chunks with the best such scores (any
  other chunk's best is below k distinct candidates): one max per chunk of the raw logits, a
  top-k over the chunk scores, and a top-k over the k chosen chunks, scored. Only the per-beam
  log-normaliser takes another pass over the logits (without a mask, the row maximum it needs is
  the maximum of the chunk maxima). (`python scripts/bench_decode.py --top_k`
  compares it with XLA's top_k over the materialised scores.)
  """
  logits = ops.cast(logits, "float32")                                           # [b, beam, V]
  beam, vocab = logits.shape[1], logits.shape[2]
  chunk = chunk or _chunk_size(vocab)
  chunks = -(-vocab // chunk)
  chunked = beam * chunks > 4 * k

  def score(x, m, l, a):
    return ((x - m) - l) + a

  if chunked:
    padded = ops.reshape(
        ops.pad(ops.where(mask, logits, NEG_INF) if mask is not None else logits,
                [(0, 0), (0, 0), (0, chunks * chunk - vocab)], constant_values=NEG_INF),
        (-1, beam * chunks, chunk))                                              # [b, beam*nc, chunk]
    chunk_max = ops.max(padded, axis=-1)                                         # [b, beam*nc]
  # Without a mask the row maximum is the maximum of its chunks' (the same value, one pass less
  # over the logits); a mask hides some logits from the chunks but not from the normaliser.
  row_max = (ops.max(ops.reshape(chunk_max, (-1, beam, chunks)), axis=-1)
             if chunked and mask is None else ops.max(logits, axis=-1))          # [b, beam]
  log_norm = ops.log(ops.sum(ops.exp(logits - row_max[..., None]), axis=-1))     # [b, beam]
  if not chunked:
    if mask is not None:
      logits = ops.where(mask, logits, NEG_INF)                                  # [b, beam, V]
    scores = score(logits, row_max[..., None], log_norm[..., None], alive_log_probs[..., None])
    return ops.top_k(ops.reshape(scores, (-1, beam * vocab)), k)
  beam_of_chunk = ops.repeat(ops.arange(beam, dtype="int32"), chunks)            # [beam*nc]
  per_chunk = lambda t: gather(t, beam_of_chunk, axis=1)                         # [b, beam*nc]
  chunk_scores = score(chunk_max, per_chunk(row_max), per_chunk(log_norm),
                       per_chunk(alive_log_probs))                               # [b, beam*nc]
  _, top_chunks = ops.top_k(chunk_scores, k)                                     # [b, k]
  top_chunks = ops.sort(top_chunks, axis=-1)  # candidates in index order, as top_k breaks ties
  candidates = take_rows(padded, top_chunks)                                     # [b, k, chunk]
  source_beam = top_chunks // chunks                                             # [b, k]
  per_candidate = lambda t: take_rows(t, source_beam)[..., None]                 # [b, k, 1]
  candidates = score(candidates, per_candidate(row_max), per_candidate(log_norm),
                     per_candidate(alive_log_probs))                             # [b, k, chunk]
  values, position = ops.top_k(ops.reshape(candidates, (-1, k * chunk)), k)      # [b, k]
  chosen = take_rows(top_chunks, position // chunk)                              # [b, k]
  token = (chosen % chunks) * chunk + position % chunk
  return values, (chosen // chunks) * vocab + token


def grow(state, symbols_to_logits_fn, batch_size, beam_size, vocab_size, alpha, eos_id,
         constraint=None, reorder_cache=None, first_step_fn=None):
  """One step: extend every alive hypothesis by one token, update alive and finished.

  The cache follows the alive hypotheses with `reorder_cache(cache, source_beams [batch, beam])`
  (see `beam_search`), by default `gather_beams`: every [batch * beam, ...] tensor's rows copied.

  `first_step_fn(ids [batch], cache) -> (logits [batch, vocab], cache)`: step 0 run once per
  sentence instead (see `beam_search`); the candidates then all continue hypothesis 0, the only
  one alive.

  `state.step` is a scalar (the batch search), or [batch]: each sentence at its own step (a
  refill search's slots, `t2t_lite.decoding.refill_search`); the callback and the constraint then
  get a step per hypothesis [batch * beam], and a sentence already done keeps its step.
  """
  step = state.step                                                              # [] or [batch]
  per_row = len(step.shape) == 1
  hypothesis_step = ops.repeat(step, beam_size) if per_row else step             # [] or [b*beam]
  last_ids = read_at(state.alive_ids, step)                                      # [batch, beam]
  rows = beam_size  # the hypotheses of a sentence the model is run for
  if first_step_fn is None:
    logits, cache = symbols_to_logits_fn(
        ops.reshape(last_ids, (batch_size * beam_size,)), hypothesis_step,
        state.cache)                                                             # [batch*beam, V]
  else:
    rows = 1
    logits, cache = first_step_fn(last_ids[:, 0], state.cache)                   # [batch, V]
  mask = None
  if constraint is not None:
    mask = ops.reshape(constraint.allowed(state.constraint, hypothesis_step),
                       (batch_size, beam_size, vocab_size))[:, :rows]            # [b, rows, V]
  # Every candidate has length step + 1, so ranking by log-prob is ranking by score.
  topk_log_probs, topk_flat = top_candidates(
      ops.reshape(logits, (batch_size, rows, vocab_size)), state.alive_log_probs[:, :rows],
      2 * beam_size, mask=mask)                                                  # [b, 2*beam]
  topk_beams = ops.floor_divide(topk_flat, vocab_size)                           # [b, 2*beam]
  topk_tokens = ops.cast(ops.mod(topk_flat, vocab_size), "int32")                # [b, 2*beam]
  topk_ids = take_rows(state.alive_ids, topk_beams)                              # [b, 2*beam, L+1]
  topk_ids = write_at(topk_ids, step + 1, topk_tokens)                           # [b, 2*beam, L+1]
  topk_finished = (topk_tokens == eos_id) & (topk_log_probs > NEG_INF)           # [b, 2*beam]

  # Alive: the beam best candidates that did not write EOS (and their caches).
  alive_log_probs, alive_pick = ops.top_k(
      ops.where(topk_finished, NEG_INF, topk_log_probs), beam_size)              # [b, beam]
  alive_ids = take_rows(topk_ids, alive_pick)                                    # [b, beam, L+1]
  source_beams = take_rows(topk_beams, alive_pick)                               # [b, beam]
  cache = (gather_beams(cache, source_beams, beam_size) if reorder_cache is None
           else reorder_cache(cache, source_beams))                              # [b*beam, ...]
  constraint_state = state.constraint
  if constraint is not None:
    alive_tokens = take_rows(topk_tokens, alive_pick)                            # [b, beam]
    constraint_state = constraint.update(
        gather_beams(constraint_state, source_beams, beam_size),
        ops.reshape(alive_tokens, (-1,)), hypothesis_step)                       # [b*beam, ...]

  # Finished: the beam best of the old finished and the candidates that wrote EOS.
  penalty = length_penalty(step + 1, alpha)                                      # [] or [batch]
  penalty = penalty[:, None] if per_row else penalty                             # [] or [b, 1]
  new_scores = ops.where(topk_finished, topk_log_probs / penalty, NEG_INF)       # [b, 2*beam]
  finished_scores, finished_pick = ops.top_k(
      ops.concatenate([state.finished_scores, new_scores], axis=1), beam_size)   # [b, beam]
  finished_ids = take_rows(
      ops.concatenate([state.finished_ids, topk_ids], axis=1), finished_pick)    # [b, beam, L+1]
  # Candidates come best first: those of the beam best that ended (`stop_when_finished`'s count).
  ended = state.ended + ops.sum(ops.cast(topk_finished[:, :beam_size], "int32"), axis=1)  # [b]

  done = state.done                                                              # [batch]
  return BeamState(
      step=next_step(step, done),
      alive_ids=_keep_done(done, state.alive_ids, alive_ids),                    # [b, beam, L+1]
      alive_log_probs=_keep_done(done, state.alive_log_probs, alive_log_probs),  # [b, beam]
      finished_ids=_keep_done(done, state.finished_ids, finished_ids),           # [b, beam, L+1]
      finished_scores=_keep_done(done, state.finished_scores, finished_scores),  # [b, beam]
      done=done,
      ended=_keep_done(done, state.ended, ended),                                # [batch]
      cache=cache,
      constraint=constraint_state)


def sentence_done(state, limits, alpha, stop_early, best_only=False, stop_when_finished=False):
  """Which sentences are over: reached their length limit, or (stop_early) cannot improve.

  The bound (T2T's `_is_finished`): alive log-probs only fall as tokens are added and the length
  penalty is at most `length_penalty(limit)`, so no alive hypothesis can score above
  `best_alive_log_prob / length_penalty(limit)`; if the lowest finished score is above that,
  the finished set is final. With `best_only` (a Python bool, or a scalar bool tensor: one
  compiled search serves both), the best finished score is compared instead, T2T's rule when it
  returns one beam (`stop_early=(top_beams == 1)`): the best hypothesis is then final.
  `stop_when_finished` (a Python bool) also stops a sentence once `beam` of its hypotheses have
  ended among their step's `beam` best candidates (`state.ended`; the module docstring): not exact.
  """
  done = state.done | (state.step >= limits)                                     # [batch]
  if not stop_early:
    return done
  best_possible = state.alive_log_probs[:, 0] / length_penalty(limits, alpha)    # [batch]
  has_finished = state.finished_scores > NEG_INF                                 # [batch, beam]
  lowest_finished = ops.min(
      ops.where(has_finished, state.finished_scores, float("inf")), axis=1)      # [batch]
  compared = ops.where(best_only, ops.max(state.finished_scores, axis=1), lowest_finished)  # [batch]
  bound_met = ops.any(has_finished, axis=1) & (compared > best_possible)         # [batch]
  if stop_when_finished:
    bound_met = bound_met | (state.ended >= has_finished.shape[1])               # [batch]
  return done | bound_met                                                        # [batch]


def finalize(state, fill_with_alive=True):
  """Best-first ids [batch, beam, max_decode_length] (start token dropped) and scores [batch, beam].

  Finished hypotheses come first (length-penalised scores); slots left empty are filled with
  the best alive hypotheses (raw log-probabilities), T2T's fallback for sentences that finish none.
  With `fill_with_alive=False` (constrained decoding, where an unfinished hypothesis breaks the
  constraint), a sentence with at least one finished hypothesis keeps its other slots empty:
  ids 0, score -inf.
  """
  beam_size = state.finished_scores.shape[1]
  num_finished = ops.sum(ops.cast(state.finished_scores > NEG_INF, "int32"), axis=1)  # [batch]
  slots = ops.arange(beam_size, dtype="int32")[None, :]                          # [1, beam]
  from_finished = slots < num_finished[:, None]                                  # [batch, beam]
  if not fill_with_alive:
    from_finished = from_finished | (num_finished > 0)[:, None]                  # [batch, beam]
  alive_pick = ops.clip(slots - num_finished[:, None], 0, beam_size - 1)         # [batch, beam]
  ids = ops.where(from_finished[:, :, None], state.finished_ids,
                  take_rows(state.alive_ids, alive_pick))                        # [b, beam, L+1]
  scores = ops.where(from_finished, state.finished_scores,
                     take_rows(state.alive_log_probs, alive_pick))               # [b, beam]
  if not fill_with_alive:
    ids = ops.where((scores > NEG_INF)[:, :, None], ids, 0)                      # [b, beam, L+1]
  return ids[:, :, 1:], scores                                                   # [b, beam, L]


def _check_arguments(batch_size, beam_size, vocab_size, max_decode_length):
  """beam_size and vocab_size must be Python ints; batch_size and max_decode_length may also be
  scalar int tensors (TensorFlow: a SavedModel taking any batch and length)."""
  for name, value, minimum in (("beam_size", beam_size, 1), ("vocab_size", vocab_size, 2)):
    if not isinstance(value, int) or value < minimum:
      raise ValueError(f"{name} must be a Python int >= {minimum}, got {value!r}")
  for name, value in (("batch_size", batch_size), ("max_decode_length", max_decode_length)):
    if isinstance(value, int) and value < 1:
      raise ValueError(f"{name} must be >= 1, got {value}")


def run_beam_search(symbols_to_logits_fn, initial_cache, batch_size, beam_size, vocab_size,
                    max_decode_length, alpha=0.6, eos_id=EOS_ID, decode_lengths=None, stop_early=True,
                    constraint=None, constraint_state=None, cache_lengths=None, extend_cache=None,
                    reorder_cache=None, best_only=False, stop_when_finished=False, fixed=None,
                    batch_sizes=None, first_step_fn=None):
  """Runs the search loop and returns the final `BeamState` (`state.step`: steps run).

  Arguments: see `beam_search`. `beam_size=1` runs the beam algorithm itself (not greedy).
  """
  _check_arguments(batch_size, beam_size, vocab_size, max_decode_length)
  check_cache_phases(cache_lengths, extend_cache, max_decode_length)
  if batch_sizes is not None and (not isinstance(batch_size, int) or batch_sizes[0] != batch_size):
    raise ValueError(f"batch_sizes must start with the batch size, a Python int; got "
                     f"{batch_sizes!r} for batch_size {batch_size!r}")
  extras = {"limits": decode_limits(decode_lengths, batch_size, max_decode_length),  # [batch]
            "fixed": {} if fixed is None else fixed}

  def step(state, extras, batch, first=None):
    fn = symbols_to_logits_fn
    if fixed is not None:
      fn = lambda ids, at, cache: symbols_to_logits_fn(ids, at, cache, extras["fixed"])  # noqa: E731
    state = grow(state, fn, batch, beam_size, vocab_size, alpha, eos_id, constraint, reorder_cache,
                 first)
    return state._replace(done=sentence_done(state, extras["limits"], alpha, stop_early, best_only,
                                             stop_when_finished))

  def cond(state):
    return (state.step < max_decode_length) & ops.logical_not(ops.all(state.done))

  state = init_state(initial_cache, batch_size, beam_size, max_decode_length,
                     checked_constraint_state(constraint, constraint_state),
                     tile_cache=reorder_cache is None)
  if first_step_fn is not None and vocab_size >= 2 * beam_size:
    # Step 0 once per sentence, before the loop (whose first phase goes on from step 1). With a
    # vocabulary under 2 * beam the loop's step 0 runs: its candidates include empty beams'.
    state = step(state, extras, batch_size, first_step_fn)
  if batch_sizes is not None and len(batch_sizes) > 1:
    return shrinking.run_shrinking(cond, step, state, extras, batch_sizes, cache_lengths,
                                   extend_cache)
  return run_phases(cond, lambda state: (step(state, extras, batch_size),), state, cache_lengths,
                    extend_cache)


def beam_search(symbols_to_logits_fn, initial_cache, batch_size, beam_size, vocab_size,
                max_decode_length, alpha=0.6, eos_id=EOS_ID, decode_lengths=None, stop_early=True,
                constraint=None, constraint_state=None, cache_lengths=None, extend_cache=None,
                reorder_cache=None, best_only=False, stop_when_finished=False, fixed=None,
                batch_sizes=None, first_step_fn=None):
  """Beam search with length penalty (paper section 6.1: beam 4, alpha 0.6).

  Args:
    symbols_to_logits_fn: `(ids [batch*beam] int32, step [] int32, cache) ->
      (logits [batch*beam, vocab], cache)`; `ids` are the last tokens (0 at step 0).
    initial_cache: nested dict of tensors [batch, ...] (may be empty); tiled here to
      [batch * beam, ...] before the first call.
    batch_size, max_decode_length: Python ints, or scalar int32 tensors under tf.function (an
      exported search taking any batch and length; the buffers keep their shape across steps).
    beam_size, vocab_size: Python ints.
    alpha: length penalty exponent; 0 ranks by plain log-probability, larger favours longer.
    eos_id: the end-of-sentence id (T2T: 1). Decoding starts from id 0 (T2T).
    decode_lengths: optional int32 [batch]: each sentence's maximum output length, EOS included
      (input length + extra_length, capped at max_decode_length). A sentence whose hypotheses
      reach it stops: finished hypotheses are kept, and if there are none, the alive ones.
    stop_early: stop a sentence once its best hypotheses are provably found (T2T's bound).
    best_only: only the best hypothesis is wanted (a Python bool, or a scalar bool tensor):
      stop a sentence once it is provably found (T2T's `stop_early=(top_beams == 1)`). Its
      ids and score are those of the full search; the other slots may differ.
    stop_when_finished: also stop a sentence once `beam_size` of its hypotheses have ended among
      their step's `beam_size` best candidates (CTranslate2's rule; a Python bool). Faster, not
      exact: the results may differ from the full search's (see the module docstring).
    constraint, constraint_state: optional; see `t2t_lite.decoding.constraints`. The state
      ([batch, ...]) is tiled to the beams and reordered with them.
    cache_lengths, extend_cache: optional, the cache grown in phases (`sampling.run_phases`):
      increasing Python ints ending at max_decode_length (`initial_cache` holds the first), and
      `extend_cache(cache, length)` (cache [batch * beam, ...]), which grows it to the next.
      The early steps then gather and attend over a short cache; the results are the same.
    reorder_cache: optional `(cache, source_beams [batch, beam] int32) -> cache`: how the cache
      follows the alive hypotheses after each step (hypothesis j of a sentence continues its
      old hypothesis source_beams[b, j]). Default: `gather_beams`, every tensor's rows copied.
      With it, `initial_cache` is the first step's cache as it is, not tiled: the caller lays it
      out for the beams (e.g. `Transformer.init_cache(..., beam_size=)`, whose keys/values stay
      put and whose lineage alone is reordered: `translator.reorder_lineage`).
    fixed: optional, a nested structure of per-sentence tensors ([batch * k, ...]) that the
      steps read and never change (e.g. the encoder-decoder keys and values). With it the
      callback is `(ids, step, cache, fixed)`, given the rows of the sentences of its batch.
    batch_sizes: optional, the batch shrinks as sentences end (`shrinking.run_shrinking`,
      e.g. `shrinking.batch_sizes(batch_size, 4)`): decreasing Python ints, the first
      `batch_size`. The results are those of the full batch's search.
    first_step_fn: optional `(ids [batch] int32, cache) -> (logits [batch, vocab], cache)`:
      step 0 computed once per sentence rather than for each of its `beam_size` hypotheses
      (before it every hypothesis is the start token and only the first is alive), on the
      cache as `initial_cache` lays it out, returning it as step 0 leaves it once every
      hypothesis continues hypothesis 0 (`reorder_cache` still runs, with source beams 0); e.g.
      `Transformer.decode_step(..., shared_start=True)` on a cache the beams share. The results
      are the search's without it (CTranslate2 expands its beams after the first step too).

  Returns:
    ids [batch, beam, max_decode_length] int32, best first, 0 (PAD) after EOS, and scores
    [batch, beam] float32 (length-penalised log-probabilities; see `finalize`). Under a
    constraint, slots no finished hypothesis filled are empty (ids 0, score -inf) unless the
    sentence finished none.
    `beam_size=1` is greedy decoding (as in T2T): scores are the summed log-probabilities.
  """
  if beam_size == 1:
    _check_arguments(batch_size, beam_size, vocab_size, max_decode_length)
    ids, scores = greedy_search(symbols_to_logits_fn, initial_cache, batch_size,
                                max_decode_length, eos_id, decode_lengths, constraint,
                                constraint_state, cache_lengths, extend_cache)
    return ids[:, None, :], scores[:, None]                      # [batch, 1, L], [batch, 1]
  return finalize(run_beam_search(symbols_to_logits_fn, initial_cache, batch_size, beam_size,
                                  vocab_size, max_decode_length, alpha, eos_id, decode_lengths,
                                  stop_early, constraint, constraint_state, cache_lengths,
                                  extend_cache, reorder_cache, best_only, stop_when_finished,
                                  fixed, batch_sizes, first_step_fn),
                  fill_with_alive=constraint is None)
