"""Beam search and greedy decoding over slots refilled as sentences finish (in-flight batching).

The batch searches (`beam_search.beam_search`, `sampling.greedy_search`) run a batch until its
last sentence ends, every row paying each step while the short sentences' rows wait. Here
`num_slots` slots run side by side, each holding one sentence's whole search state: its alive and
finished hypotheses and their scores, its own step, its rows of the self-attention cache, its
inputs to the model (e.g. the encoder's keys and values) and its constraint state. When a slot's
sentence is done, its results are written at that sentence's index and the slot takes the next
waiting sentence, at step 0, while the other slots go on. A step costs the same whatever the slots
hold, so the work is slots x steps until the last sentence ends; sentences are taken in index
order, and the caller orders them (the SavedModel: longest source first, which keeps the last
steps, when slots run empty, short; `scripts/batching_cost.py` counts that order).

Each slot runs the batch search's own per-sentence algorithm at its own step (`step` [slots]):
`beam_search.grow`, `sentence_done` (the same length limit and early stop) and `finalize`, or
`sampling.sampling_step` with the argmax for greedy decoding (beam 1). So a sentence's results
are the batch search's, token for token, the scores up to the order of float sums (tested
against the batch search sentence by sentence, tests/test_refill_search.py).

The model is reached through one callback:

    symbols_to_logits_fn(ids [slots * beams] int32, steps [slots * beams] int32, cache, inputs)
        -> (logits [slots * beams, vocab], new_cache)

`cache`: the growing self-attention cache, [slots * beams, ...] (sentence-major, as
`beam_search`'s), gathered with the hypotheses every step; `inputs`: each row's sentence's entries
of `sentence_inputs` ([N, ...], e.g. the encoder-decoder keys and values and the source mask).
With `reorder_cache` (`beam_search`'s), the cache is laid out by the caller and follows the
hypotheses as that function says, and `inputs` are each slot's sentence's entries, [slots, ...]:
the Transformer's cache shared by a slot's beams (`translator.shared_beams`), the memory keys and
values once per slot, one self-attention cache [slots, H, L * beams, d] written in place, and a
lineage [slots * beams, L] that alone is reordered. A slot that holds no sentence, or whose
sentence is done, still runs (its rows are part of the batch) but changes nothing.

A refilled slot gets a fresh search state (its step back to 0), its new sentence's inputs,
constraint state and length limit. Its self-attention cache (keys, values and lineage) is not
cleared: a row at step t writes position t, keys/values and lineage, before any query reads it,
and the causal rule on the row's own step gives every later position exactly zero weight,
whatever an earlier sentence left there; so a query only ever reads positions its current
sentence wrote (tests/test_per_row_steps.py; tests/test_refill_search.py runs sentences through
one slot after longer ones).

The cache grows in phases (`cache_lengths`, as in the batch searches, `sampling.run_phases`): a
step runs in a phase while every occupied slot's step is below the phase's length; when a slot
needs the next position, the cache grows to the next length (zeros appended) for all the slots
and for the rest of the search. It never shrinks: a refilled slot restarts at position 0, but
with the longest sentences first the longest running sentence keeps the cache's length until
near the end, and each change of length costs a copy of the whole cache.
"""

from typing import Any, NamedTuple

import keras
from keras import ops

from t2t_lite.decoding.beam_search import (_check_arguments, finalize, grow, init_state,
                                           sentence_done, tile_to_beams)
from t2t_lite.decoding.gathers import gather
from t2t_lite.decoding.sampling import (SamplingState, check_cache_phases, first_argmax, run_phases,
                                        sampling_step)
from t2t_lite.token_ids import EOS_ID, START_ID


class RefillState(NamedTuple):
  """The loop variables of the refill search."""
  step: Any       # [] int32: the largest step of an occupied slot (the cache's next position)
  cache: Any      # the growing cache, each tensor [slots * beams, ...] (or the caller's layout)
  slots: Any      # the slots' BeamState (beam > 1) or SamplingState (greedy); step [slots]; cache {}
  sentence: Any   # [slots] int32: the sentence each slot holds; num_sentences: none
  waiting: Any    # [] int32: the next sentence to start (num_sentences: none left)
  inputs: Any     # each row's sentence inputs, [slots * beams, ...] ([slots, ...]: reorder_cache)
  limits: Any     # [slots] int32: the slot's sentence's output length limit, EOS included
  ids: Any        # [N, beams, max_decode_length] int32: the results, by sentence
  scores: Any     # [N, beams] float32


class _BeamSlots:
  """Each slot runs `beam_search`'s algorithm for its sentence."""

  def __init__(self, beam_size, vocab_size, alpha, eos_id, stop_early, constraint, reorder_cache,
               best_only, stop_when_finished):
    self.beams, self.vocab_size, self.alpha = beam_size, vocab_size, alpha
    self.eos_id, self.stop_early, self.constraint = eos_id, stop_early, constraint
    self.reorder_cache, self.best_only = reorder_cache, best_only
    self.stop_when_finished = stop_when_finished

  def fresh(self, slots, max_decode_length):
    """A new sentence's state in every slot (constraint {}: the caller's)."""
    state = init_state({}, slots, self.beams, max_decode_length)
    return state._replace(step=ops.zeros((slots,), "int32"))                     # step [slots]

  def emptied(self, state):
    return state._replace(done=ops.ones_like(state.done))

  def step(self, state, symbols_to_logits_fn, slots, limits):
    state = grow(state, symbols_to_logits_fn, slots, self.beams, self.vocab_size, self.alpha,
                 self.eos_id, self.constraint, self.reorder_cache)
    return state._replace(done=sentence_done(state, limits, self.alpha, self.stop_early,
                                             self.best_only, self.stop_when_finished))

  def done(self, state):
    return state.done                                                            # [slots]

  def results(self, state):
    return finalize(state, fill_with_alive=self.constraint is None)  # [S, beam, L], [S, beam]


class _GreedySlots:
  """Each slot runs greedy decoding (`sampling.greedy_search`'s step) for its sentence."""
  beams = 1

  def __init__(self, eos_id, constraint):
    self.eos_id, self.constraint = eos_id, constraint

  def fresh(self, slots, max_decode_length):
    return SamplingState(
        step=ops.zeros((slots,), "int32"),                                         # [slots]
        ids=ops.full((slots, max_decode_length + 1), START_ID, dtype="int32"),     # [slots, L+1]
        log_probs=ops.zeros((slots,), "float32"),                                  # [slots]
        finished=ops.zeros((slots,), "bool"),                                      # [slots]
        cache={}, constraint={})

  def emptied(self, state):
    return state._replace(finished=ops.ones_like(state.finished))

  def step(self, state, symbols_to_logits_fn, slots, limits):
    del slots
    pick = lambda logits, step: first_argmax(logits)  # noqa: E731 (greedy_search's)
    return sampling_step(state, symbols_to_logits_fn, pick, limits, self.eos_id, self.constraint)

  def done(self, state):
    return state.finished                                                        # [slots]

  def results(self, state):
    return state.ids[:, None, 1:], state.log_probs[:, None]             # [S, 1, L], [S, 1]


def _select_rows(rows, new, old):
  """Per leaf: row i of `new` where rows[i], else of `old` (rows [R] bool, leaves [R, ...])."""
  def pick(a, b):
    return ops.where(ops.reshape(rows, (-1,) + (1,) * (len(b.shape) - 1)), a, b)
  return keras.tree.map_structure(pick, new, old)


def refill_search(symbols_to_logits_fn, sentence_inputs, initial_cache, num_slots, beam_size,
                  vocab_size, max_decode_length, decode_lengths, num_sentences=None, alpha=0.6,
                  eos_id=EOS_ID, stop_early=True, constraint=None, constraint_state=None,
                  cache_lengths=None, extend_cache=None, reorder_cache=None, best_only=False,
                  stop_when_finished=False):
  """Decodes N sentences through `num_slots` slots refilled as sentences finish.

  Args:
    symbols_to_logits_fn: `(ids [S*beams], steps [S*beams], cache, inputs) -> (logits, cache)`
      (module docstring); `steps` are each row's own positions.
    sentence_inputs: nested dict of tensors [N, ...], each sentence's inputs to the callback
      (may be empty); N >= 1.
    initial_cache: nested dict of zero tensors [num_slots, ...], the growing cache of the slots
      (at `cache_lengths[0]` positions); tiled here to [num_slots * beams, ...] (with
      `reorder_cache`: the slots' cache as the caller lays it out, taken as it is).
    num_slots: S, a Python int or a scalar int32 tensor (shapes of the loop's state).
    beam_size, vocab_size: Python ints; `beam_size=1` is greedy decoding (`greedy_search`).
    max_decode_length: the output buffers' length (Python int, or a scalar tensor without phases).
    decode_lengths: int32 [N], each sentence's maximum output length, EOS included.
    num_sentences: optional scalar: only sentences 0 .. num_sentences - 1 are decoded, the others
      (padding) get ids 0 and score 0. Default: all N.
    alpha, eos_id, stop_early, best_only, stop_when_finished: as `beam_search` (a slot whose
      sentence stops sooner, with best_only or stop_when_finished, takes the next one sooner).
    constraint, constraint_state: optional, a constraint and its initial state [N, ...] per
      sentence (`t2t_lite.decoding.constraints`).
    cache_lengths, extend_cache: optional, the cache grown in phases (`sampling.run_phases`).
    reorder_cache: optional, beam > 1: `(cache, source_beams [S, beams]) -> cache`, how the cache
      follows the hypotheses (`beam_search`'s); the callback's `inputs` are then per slot.

  Returns:
    ids [N, beams, max_decode_length] int32 and scores [N, beams] float32, each sentence's the
    batch search's for it (`beam_search.beam_search`; beams is 1 for greedy).
  """
  _check_arguments(num_slots, beam_size, vocab_size, max_decode_length)
  check_cache_phases(cache_lengths, extend_cache, max_decode_length)
  if constraint is not None and constraint_state is None:
    raise ValueError("a constraint needs its initial state: pass constraint_state= "
                     "(constraint.initial_state(...), one row per sentence)")
  algo = (_GreedySlots(eos_id, constraint) if beam_size == 1 else
          _BeamSlots(beam_size, vocab_size, alpha, eos_id, stop_early, constraint, reorder_cache,
                     best_only, stop_when_finished))
  beams = algo.beams
  # The callback's inputs: one copy per slot for a cache the beams share, else one per row.
  copies = 1 if reorder_cache is not None else beams
  decode_lengths = ops.cast(ops.convert_to_tensor(decode_lengths), "int32")       # [N]
  total = ops.shape(decode_lengths)[0]                                           # N
  limits_all = ops.clip(decode_lengths, 1, max_decode_length)                    # [N]
  count = total if num_sentences is None else ops.cast(num_sentences, "int32")   # []
  constraint_state = constraint_state if constraint is not None else {}
  fresh = algo.fresh(num_slots, max_decode_length)

  def refill(r, free):
    """Writes the results of the `free` slots ([S] bool: done, or empty) at their sentences'
    indices, and gives each the next waiting sentence, if any."""
    ids, scores = algo.results(r.slots)                                          # [S, beams, L]
    # Sentence n's row comes from the free slot that holds it, if there is one.
    target = ops.where(free, r.sentence, -1)                                     # [S]
    hit = ops.arange(total, dtype="int32")[:, None] == target[None, :]           # [N, S]
    source_slot = ops.argmax(ops.cast(hit, "int32"), axis=1)                     # [N]
    written = ops.any(hit, axis=1)                                               # [N]
    out_ids = _select_rows(written, gather(ids, source_slot), r.ids)             # [N, beams, L]
    out_scores = _select_rows(written, gather(scores, source_slot), r.scores)

    candidate = r.waiting + ops.cumsum(ops.cast(free, "int32")) - 1              # [S]
    started = free & (candidate < count)                                         # [S]
    sentence = ops.where(started, candidate, ops.where(free, count, r.sentence))  # [S]
    waiting = r.waiting + ops.sum(ops.cast(started, "int32"))                    # []
    index = ops.clip(sentence, 0, total - 1)                                     # [S]
    row_started = ops.repeat(started, beams)                                     # [S*beams]
    gathered = lambda tree, copies: keras.tree.map_structure(                    # noqa: E731
        lambda t: gather(t, ops.repeat(index, copies)), tree)                    # [S*copies, ...]
    slots = _select_rows(started, fresh, r.slots._replace(constraint={}))
    slots = slots._replace(constraint=_select_rows(row_started, gathered(constraint_state, beams),
                                                   r.slots.constraint))
    return r._replace(
        slots=slots, sentence=sentence, waiting=waiting,
        # Every slot's (or row's) copy of its sentence's inputs: the same values where no new
        # sentence started (one gather, not a gather and a select over the keys and values of
        # every slot).
        inputs=gathered(sentence_inputs, copies),
        limits=ops.where(started, gather(limits_all, index), r.limits),
        ids=out_ids, scores=out_scores)

  def largest_step(r):
    return ops.max(ops.where(r.sentence < count, r.slots.step, 0))               # []

  def body(r):
    def fn(ids, steps, cache):
      # A finished slot's step can reach its limit: clipped, so that its (unused) rows stay in
      # the position table and the cache.
      return symbols_to_logits_fn(ids, ops.minimum(steps, max_decode_length - 1), cache, r.inputs)
    slots = algo.step(r.slots._replace(cache=r.cache), fn, num_slots, r.limits)
    r = r._replace(slots=slots._replace(cache={}), cache=slots.cache)
    free = algo.done(slots) & (r.sentence < count)                               # [S]
    r = ops.cond(ops.any(free), lambda: refill(r, free), lambda: r)
    return (r._replace(step=largest_step(r)),)

  def cond(r):
    return ops.any(r.sentence < count)

  start = lambda tree, copies: keras.tree.map_structure(                         # noqa: E731
      lambda t: gather(t, ops.zeros((num_slots * copies,), "int32")), tree)
  empty = RefillState(
      step=ops.convert_to_tensor(0, "int32"),
      cache=(initial_cache if reorder_cache is not None
             else tile_to_beams(initial_cache, beams)),                          # [S*beams, ...]
      slots=algo.emptied(fresh)._replace(constraint=start(constraint_state, beams)),
      sentence=ops.full((num_slots,), count, "int32"),                           # [S]: none
      waiting=ops.convert_to_tensor(0, "int32"),
      inputs=start(sentence_inputs, copies),                                     # [S*copies, ...]
      limits=ops.ones((num_slots,), "int32"),                                    # [S]
      ids=ops.zeros((total, beams, max_decode_length), "int32"),                 # [N, beams, L]
      scores=ops.zeros((total, beams), "float32"))                               # [N, beams]
  # Every slot is free at first: the first S sentences start (nothing is written: every slot
  # holds "none", so the rows written are dropped below).
  state = refill(empty, ops.ones((num_slots,), "bool"))
  state = state._replace(ids=empty.ids, scores=empty.scores)
  state = run_phases(cond, body, state, cache_lengths, extend_cache)
  return state.ids, state.scores
