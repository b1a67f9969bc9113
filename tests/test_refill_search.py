"""The refill search (slots refilled as sentences finish, `t2t_lite.decoding.refill_search`) gives
each sentence the batch search's results: the same ids, token for token, and the same scores.

The reference is independent of slots: the batch search (`make_search_fn`, the decoder's) run on
each sentence alone. The model is a random one-layer Transformer (d 32) whose EOS logit rises with
the step from an offset set by the sentence's source length, so sentences end at very different
steps (before and after the cache's first phase, 16 positions), by EOS, by the length limit or by
the early stop. The refill search runs as the SavedModel runs it: traced with the batch unknown,
with XLA (`jit_compile`) and as a plain graph, and its sources encoded in two sub-batches of their
own widths, padded to one (`pad_memory`); a beam's cache shared by its hypotheses (the default,
`shared_beam_cache`) and tiled per hypothesis. The SavedModel's own use of it (empty lines, n-best,
request order): tests/test_export_sorted.py.
"""

import functools

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from t2t_lite.decoding.translator import make_refill_fns, make_search_fn, pad_memory
from t2t_lite.graph_functions import graph_function
from t2t_lite.hparams import DecodeHParams, ModelConfig
from t2t_lite.models import Transformer
from t2t_lite.parsing.constraint import TreeConstraint
from t2t_lite.token_ids import EOS_ID, PAD_ID

VOCAB = 24
WIDTH = 16                      # the sources' padded width (a bucket): outputs of 16 + 20 = 36
LENGTHS = [14, 1, 9, 3, 12, 6, 2, 11]   # subwords with EOS, out of order; 1: EOS alone
ROWS = 10                       # the batch: the 8 sentences and 2 padding rows, never decoded
DECODE = DecodeHParams(alpha=0.6, extra_length=20, refill_slots=3)
# A parse-like constraint over the toy vocabulary: brackets 2, 3 open, 4 closes, 5 is the leaf,
# every other id (6 ..) a word of the source: each output a tree with one leaf per source word.
CONSTRAINT = TreeConstraint(VOCAB, open_ids=[2, 3], close_ids=[4], leaf_ids=[5],
                            word_start_ids=range(6, VOCAB))


class EosRising:
  """The model with its EOS logit raised by 1.5 x (step - an offset of 1 to 17 set by the row's
  source length: 5 to 17 for LENGTHS): each sentence ends near its own step, wherever its rows
  are. `lineages`: for each step traced, whether its cache is a beam's shared one (a lineage)."""

  def __init__(self, model):
    self.model = model
    self.lineages = []

  def __getattr__(self, name):
    return getattr(self.model, name)

  def decode_step(self, ids, step, cache, **kwargs):
    self.lineages.append("lineage" in cache)
    logits, cache = self.model.decode_step(ids, step, cache, **kwargs)
    length = ops.sum(ops.cast(cache["source_mask"], "float32"), axis=1)   # [sentences]
    if "lineage" in cache and not kwargs.get("shared_start"):  # shared by g rows: [sentences * g]
      entries = cache["decoder"]["layer_0"]["self"]["v"].shape[2]                   # L * g
      length = ops.repeat(length, entries // cache["lineage"].shape[1])             # [rows]
    bonus = 1.5 * (ops.cast(step, "float32") - (ops.mod(length * 7.0, 17.0) + 1.0))  # [rows]
    is_eos = ops.arange(VOCAB) == EOS_ID                                           # [V]
    return ops.where(is_eos[None, :], logits + bonus[:, None], logits), cache


@functools.cache
def tiny_model():
  keras.utils.set_random_seed(3)
  config = ModelConfig(hidden_size=32, filter_size=64, num_heads=4, num_encoder_layers=1,
                       num_decoder_layers=1, layer_prepostprocess_dropout=0.0,
                       attention_dropout=0.0, relu_dropout=0.0)
  model = Transformer(config, VOCAB, dtype="float32")
  model.build()
  return EosRising(model)


def sources():
  """[ROWS, WIDTH]: the sentences (random words, then EOS) and two padding rows (EOS alone)."""
  rng = np.random.default_rng(0)
  batch = np.full((ROWS, WIDTH), PAD_ID, np.int32)
  batch[:, 0] = EOS_ID
  for row, length in enumerate(LENGTHS):
    batch[row, :length - 1] = rng.integers(6, VOCAB, length - 1)
    batch[row, length - 1] = EOS_ID
  return batch


def decode_hparams(beam_size, shared=True, slots=DECODE.refill_slots, beam_stop="exact"):
  return DECODE.replace(beam_size=beam_size, shared_beam_cache=shared, refill_slots=slots,
                        beam_stop=beam_stop)


@functools.cache
def reference(beam_size, constrained, best_only=False, beam_stop="exact"):
  """Each sentence alone through the batch search, as a graph: (ids [8, beams, 36], scores)."""
  model = tiny_model()
  search = graph_function(make_search_fn(model, decode_hparams(beam_size, beam_stop=beam_stop),
                                         model.config.max_position,
                                         CONSTRAINT if constrained else None))
  results = [search(tf.constant(row[None]), best_only=best_only)
             for row in sources()[:len(LENGTHS)]]
  return (np.concatenate([ids.numpy() for ids, _ in results]),
          np.concatenate([scores.numpy() for _, scores in results]))


def refilled(beam_size, constrained, xla, counts, shared=True, slots=DECODE.refill_slots,
             order=None, best_only=False, beam_stop="exact"):
  """The refill search over all ROWS rows, the sentences in `order` (then the padding rows),
  decoding the first `count` of them for each of `counts` (one compiled program: the count is an
  argument); `shared`: the decode hparam `shared_beam_cache`; `order` default: index order."""
  model = EosRising(tiny_model().model)
  encode, search = make_refill_fns(model, decode_hparams(beam_size, shared, slots, beam_stop),
                                   model.config.max_position, CONSTRAINT if constrained else None)
  rows = list(range(len(LENGTHS)) if order is None else order) + list(range(len(LENGTHS), ROWS))
  batch = sources()[rows]
  # Two sub-batches, each encoded at its own width (its longest source: 14 and 12 subwords in
  # index order), padded to WIDTH.
  row_lengths = [(LENGTHS + [1] * (ROWS - len(LENGTHS)))[row] for row in rows]
  parts = [pad_memory(encode(batch[rows, :max(row_lengths[rows])]), WIDTH)
           for rows in (slice(0, 4), slice(4, ROWS))]
  memory = keras.tree.map_structure(lambda *t: ops.concatenate(t, axis=0), *parts)
  spec = keras.tree.map_structure(lambda t: tf.TensorSpec([None] + list(t.shape[1:]), t.dtype),
                                  memory)
  signature = [tf.TensorSpec([None, WIDTH], tf.int32), spec, tf.TensorSpec([], tf.int32)]
  compiled = graph_function(functools.partial(search, best_only=best_only), jit_compile=xla,
                            input_signature=signature)
  outputs = [compiled(tf.constant(batch), memory, tf.constant(count)) for count in counts]
  assert compiled.experimental_get_tracing_count() == 1
  # The steps ran on the layout asked for: the beam's shared cache, or one per hypothesis.
  assert model.lineages and set(model.lineages) == {shared and beam_size > 1}, model.lineages
  return [(ids.numpy(), scores.numpy()) for ids, scores in outputs]


def output_lengths(ids):
  """Tokens of each sentence's best output, EOS included (the steps its search ran)."""
  best = ids[:, 0]
  return [int(np.argmax(row == EOS_ID)) + 1 if (row == EOS_ID).any() else len(row) for row in best]


def check_equal(got, want, beam_size):
  ids, scores = got
  want_ids, want_scores = want
  assert ids.shape == want_ids.shape and ids.shape[1] == beam_size
  np.testing.assert_array_equal(ids, want_ids)
  np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-5)


# (beam, constrained, xla, shared): beam search and greedy, free and constrained, XLA and the
# plain graph; a beam's cache shared by its hypotheses (`shared_beam_cache`, the default) or
# tiled and gathered (greedy has one layout). Every pair of values of beam, constraint and XLA,
# and of the beam layout with the constraint and with XLA, in 6 runs (each a compilation), the
# translation's default (beam, free, XLA, shared) among them, rather than the cross product.
CASES = [(3, False, True, True), (3, True, False, True), (1, False, False, True),
         (1, True, True, True), (3, False, False, False), (3, True, True, False)]


def case_id(beam_size, constrained, xla, shared):
  return "-".join([f"beam{beam_size}", "constrained" if constrained else "free",
                   "xla" if xla else "graph"] + ([] if shared or beam_size == 1 else ["tiled"]))


@pytest.mark.parametrize("beam_size, constrained, xla, shared", CASES,
                         ids=[case_id(*case) for case in CASES])
def test_refill_search_gives_each_sentence_the_batch_searchs_results(beam_size, constrained, xla,
                                                                     shared):
  want_ids, want_scores = reference(beam_size, constrained)
  # The sentences really end at different steps, on both sides of the first cache phase (16).
  lengths = output_lengths(want_ids)
  assert min(lengths) < 16 < max(lengths) and len(set(lengths)) >= 5, lengths
  every, two = refilled(beam_size, constrained, xla, counts=(len(LENGTHS), 2), shared=shared)
  # 8 sentences through 3 slots: each refilled at least once; all the n-best lists.
  check_equal((every[0][:len(LENGTHS)], every[1][:len(LENGTHS)]), (want_ids, want_scores),
              beam_size)
  # Padding rows are never decoded.
  assert not every[0][len(LENGTHS):].any() and not every[1][len(LENGTHS):].any()
  # Fewer sentences than slots (2 of 3: one slot empty from the start), the same program.
  check_equal((two[0][:2], two[1][:2]), (want_ids[:2], want_scores[:2]), beam_size)
  assert not two[0][2:].any() and not two[1][2:].any()


@pytest.mark.parametrize("beam_size, shared", [(3, True), (3, False), (1, True)],
                         ids=["beam3", "beam3-tiled", "greedy"])
def test_a_refilled_slot_reads_only_its_new_sentences_cache_entries(beam_size, shared):
  """Two slots, the sentences longest output first: each slot's later sentences start at step 0
  over the keys/values (and, shared, the lineage) of a longer sentence before them, while the
  other slot is steps ahead; what a query may read follows its own row's step, so none of the
  old entries weighs in and every sentence gets the batch search's results. (A mask that let a
  row see the positions up to the search's largest step, as a batch search's scalar step does,
  gives the refilled sentences different outputs here.)"""
  want_ids, want_scores = reference(beam_size, False)
  lengths = output_lengths(want_ids)
  order = sorted(range(len(LENGTHS)), key=lambda i: -lengths[i])
  # Longest first: a slot's next sentence is never longer than its last, and mostly shorter,
  # which leaves it the old sentence's entries past its own.
  assert lengths[order[0]] > lengths[order[2]] and len(set(lengths)) >= 5, lengths
  (ids, scores), = refilled(beam_size, False, False, counts=(len(LENGTHS),), shared=shared,
                            slots=2, order=order)
  check_equal((ids[:len(LENGTHS)], scores[:len(LENGTHS)]),
              (want_ids[order], want_scores[order]), beam_size)


@pytest.mark.parametrize("constrained", [False, True], ids=["free", "constrained"])
def test_refill_search_stopping_at_the_best_beam_gives_the_batch_searchs_results(constrained):
  """`best_only` (the decoder's and serving_default's rule): a slot's sentence stops once its best
  beam is found, as in the batch search with it, whose best beam is that of the full search."""
  want_ids, want_scores = reference(3, constrained, best_only=True)
  full_ids, full_scores = reference(3, constrained)
  np.testing.assert_array_equal(want_ids[:, 0], full_ids[:, 0])
  np.testing.assert_allclose(want_scores[:, 0], full_scores[:, 0], rtol=1e-5, atol=1e-5)
  if not constrained:  # one sentence stops sooner, before its other beams are the full search's
    assert not np.array_equal(want_ids, full_ids)
  (ids, scores), = refilled(3, constrained, True, counts=(len(LENGTHS),), best_only=True)
  check_equal((ids[:len(LENGTHS)], scores[:len(LENGTHS)]), (want_ids, want_scores), 3)


def test_refill_search_with_the_finished_stop_gives_the_batch_searchs_results():
  """Decode hparam `beam_stop=finished` (a sentence stops once beam_size hypotheses have ended):
  through the slots as in the batch search with it."""
  want_ids, want_scores = reference(3, False, beam_stop="finished")
  assert not np.array_equal(want_ids, reference(3, False)[0])  # it stops sooner than the exact rule
  (ids, scores), = refilled(3, False, False, counts=(len(LENGTHS),), beam_stop="finished")
  check_equal((ids[:len(LENGTHS)], scores[:len(LENGTHS)]), (want_ids, want_scores), 3)


def test_constrained_outputs_are_trees_and_differ_from_free_ones():
  """The constraint is really applied through the slots (the test above compares like with like)."""
  ids, _ = reference(3, True)
  free_ids, _ = reference(3, False)
  assert not np.array_equal(ids, free_ids)
  for row, length in zip(ids[:, 0], LENGTHS):
    tokens = row[:np.argmax(row == EOS_ID)].tolist()
    if length == 1:  # no word: no tree, EOS at once
      assert tokens == []
    else:
      assert tokens[0] in (2, 3) and tokens.count(5) == length - 1, tokens


def test_refill_search_rejects_sampling_and_no_slots():
  model = tiny_model()
  with pytest.raises(ValueError, match="sampling"):
    make_refill_fns(model, DECODE.replace(beam_size=1, sampling_temperature=1.0), 64)
  with pytest.raises(ValueError, match="refill_slots >= 1"):
    make_refill_fns(model, DECODE.replace(refill_slots=0), 64)
