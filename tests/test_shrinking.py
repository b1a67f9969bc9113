"""A beam search whose batch shrinks as its sentences end (`t2t_lite.decoding.shrinking`): the same
results as the search over the whole batch, on fewer rows.

Backend-agnostic (keras.ops + numpy), except the row count of an eager TensorFlow run.
"""

import keras
import numpy as np
import pytest
from keras import ops

from t2t_lite.decoding import shrinking
from t2t_lite.decoding.beam_search import beam_search, run_beam_search
from test_beam_search import TinyRecurrentModel, compiled, numpy

pytestmark = pytest.mark.backend_independent

BEAM, VOCAB, BATCH, LENGTH = 3, 6, 16, 12


def test_batch_sizes_halve_down_to_the_smallest():
  assert shrinking.batch_sizes(32, 4) == (32, 16, 8, 4)
  assert shrinking.batch_sizes(48, 8) == (48, 24, 12)
  assert shrinking.batch_sizes(33, 8) == (33, 17, 9)
  assert shrinking.batch_sizes(8, 8) == (8,)
  assert shrinking.batch_sizes(4, 8) == (4,)
  assert shrinking.batch_sizes(2, 1) == (2, 1)
  with pytest.raises(ValueError, match="batch_size >= 1"):
    shrinking.batch_sizes(0, 4)


class BiasedModel(TinyRecurrentModel):
  """The recurrent model plus a per-sentence bias on the logits, read from the search's `fixed`
  part (as the encoder's keys and values are), and a growing cache of the tokens read so far
  ([batch * beam, length]: grown in phases, moved with the beams)."""

  def __init__(self, seen=None, **kwargs):
    super().__init__(**kwargs)
    self.seen = seen

  def fixed(self, batch, seed):
    return {"bias": np.random.default_rng(seed).normal(size=(batch, self.vocab)).astype("float32")}

  def cache(self, batch, length, seed):
    h0 = self.initial_cache(batch, seed)["layer_0"]["h"]
    return {"layer_0": {"h": np.repeat(h0, BEAM, axis=0)},
            "read": np.zeros((batch * BEAM, length), "int32")}

  def step(self, ids, step, cache, fixed):
    if self.seen is not None:
      self.seen.append(ids.shape[0])
    logits, layer = self.symbols_to_logits(ids, step, {"layer_0": cache["layer_0"]})
    rows = ops.shape(ids)[0]
    read = cache["read"]
    at = ops.arange(read.shape[1], dtype="int32")[None, :] == step               # [1, length]
    read = ops.where(at, ops.reshape(ids, (rows, 1)), read)                      # [rows, length]
    return logits + ops.repeat(fixed["bias"], BEAM, axis=0), {**layer, "read": read}


def extend(cache, length):
  read = cache["read"]
  return {**cache, "read": ops.pad(read, [(0, 0), (0, length - read.shape[1])])}


def search(model, cache, fixed, lengths, sizes, phases):
  """The beam search over the model with its fixed part, the cache not tiled (laid out for the
  beams) and reordered row by row."""
  reorder = lambda cache, beams: keras.tree.map_structure(  # noqa: E731
      lambda t: ops.take(t, ops.reshape(beams + ops.arange(ops.shape(beams)[0])[:, None] * BEAM, (-1,)),
                         axis=0), cache)
  return beam_search(model.step, cache, BATCH, BEAM, VOCAB, LENGTH, alpha=1.0,
                     decode_lengths=lengths, fixed=fixed, batch_sizes=sizes, reorder_cache=reorder,
                     cache_lengths=phases, extend_cache=extend)


def test_shrinking_gives_the_whole_batch_results():
  # The cache in three phases (one phase: the row count test below), sentences ending at mixed
  # steps on both sides of the phase boundaries, each at its own limit or by T2T's bound.
  phases = (4, 8, LENGTH)
  model = BiasedModel(vocab=VOCAB, hidden=8, seed=7)
  lengths = np.asarray([2, 12, 3, 5, 12, 4, 7, 2, 9, 12, 6, 3, 11, 8, 2, 10], "int32")
  cache = model.cache(BATCH, phases[0], seed=8)
  fixed = model.fixed(BATCH, seed=9)
  run = compiled(lambda cache, fixed, lengths: (
      search(model, cache, fixed, lengths, None, phases),
      search(model, cache, fixed, lengths, shrinking.batch_sizes(BATCH, 2), phases)))
  (full_ids, full_scores), (ids, scores) = run(cache, fixed, lengths)
  np.testing.assert_array_equal(numpy(ids), numpy(full_ids))
  np.testing.assert_array_equal(numpy(scores), numpy(full_scores))
  # Each sentence's own search, alone, agrees: no row was mixed up with another.
  for b in (4, 9):
    rows = slice(b * BEAM, (b + 1) * BEAM)
    alone = beam_search(model.step, keras.tree.map_structure(lambda t, rows=rows: t[rows], cache),
                        1, BEAM, VOCAB, LENGTH, alpha=1.0, decode_lengths=lengths[b:b + 1],
                        fixed={"bias": fixed["bias"][b:b + 1]},
                        reorder_cache=lambda c, beams: keras.tree.map_structure(
                            lambda t: ops.take(t, ops.reshape(beams, (-1,)), axis=0), c),
                        cache_lengths=phases, extend_cache=extend)
    np.testing.assert_array_equal(numpy(alone[0])[0], numpy(ids)[b])
    np.testing.assert_allclose(numpy(alone[1])[0], numpy(scores)[b], rtol=1e-6)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                    reason="counts the rows of each step, which eager TensorFlow runs one by one")
def test_the_steps_run_on_fewer_rows_as_sentences_end():
  seen = []
  model = BiasedModel(seen=seen, vocab=VOCAB, hidden=8, seed=7)
  # Most sentences stop after 2 or 3 tokens, two run to 12.
  lengths = np.asarray([2, 12, 3, 2, 2, 3, 2, 2, 3, 12, 2, 3, 2, 2, 2, 3], "int32")
  cache, fixed = model.cache(BATCH, LENGTH, seed=8), model.fixed(BATCH, seed=9)
  state = run_beam_search(model.step, cache, BATCH, BEAM, VOCAB, LENGTH, alpha=1.0,
                          decode_lengths=lengths, fixed=fixed, stop_early=False,
                          batch_sizes=shrinking.batch_sizes(BATCH, 2),
                          reorder_cache=lambda c, beams: keras.tree.map_structure(
                              lambda t: ops.take(t, ops.reshape(
                                  beams + ops.arange(ops.shape(beams)[0])[:, None] * BEAM, (-1,)),
                                  axis=0), c))
  assert int(numpy(state.step)) == LENGTH
  rows = [n // BEAM for n in seen]
  assert rows[:2] == [BATCH, BATCH]        # 16 running until the first end at step 2
  assert rows[3:] == [2] * (LENGTH - 3)    # after step 3, only the two long ones
  assert rows == sorted(rows, reverse=True)


def test_bad_sizes_are_explained():
  model = BiasedModel(vocab=VOCAB, hidden=8, seed=7)
  cache, fixed = model.cache(BATCH, LENGTH, seed=8), model.fixed(BATCH, seed=9)
  with pytest.raises(ValueError, match="start with the batch size"):
    beam_search(model.step, cache, BATCH, BEAM, VOCAB, LENGTH, fixed=fixed, batch_sizes=(8, 4))
  with pytest.raises(ValueError, match="decreasing"):
    beam_search(model.step, cache, BATCH, BEAM, VOCAB, LENGTH, fixed=fixed, batch_sizes=(16, 16))


@pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                    reason="the Translator compiles its search with TensorFlow's XLA")
def test_the_translator_compiled_with_xla_translates_alike():
  # A random Transformer whose outputs end at mixed lengths (sources of 2 to 13 subwords, output
  # limits source + 6), a batch of 8 padded from 7 sentences, shrinking to 2: the same ids and
  # scores as every step over the whole batch, with the beams sharing a cache (the default) or
  # each its own (the encoder's keys and values then tiled to the beams: k = beam rows a sentence).
  from t2t_lite.decoding.translator import Translator
  from t2t_lite.hparams import DecodeHParams
  from test_cache_phases import tiny_transformer
  model = tiny_transformer(seed=3)
  rng = np.random.default_rng(4)
  sources = [list(rng.integers(2, 10, size=n)) + [1] for n in (1, 12, 3, 6, 2, 9, 4)]

  class Recording:
    """The model, recording the rows of each decode step the search is traced with and whether
    its cache is the beams' shared one (it has a lineage)."""

    def __init__(self):
      self.steps = set()

    def __getattr__(self, name):
      return getattr(model, name)

    def decode_step(self, ids, step, cache, **kwargs):
      self.steps.add((ids.shape[0], "lineage" in cache))
      return model.decode_step(ids, step, cache, **kwargs)

  def translate(shrink, shared):
    hparams = DecodeHParams(beam_size=3, alpha=0.6, extra_length=6, batch_size=8,
                            shrink_batch=shrink, shared_beam_cache=shared)
    recording = Recording()
    return Translator(recording, None, hparams).translate_ids(sources), recording.steps

  full, steps = translate(0, True)
  lengths = {len(line[0][0]) for line in full}
  assert len(lengths) >= 3, f"the outputs should end at mixed lengths, got lengths {lengths}"
  # The whole batch, traced for any batch size (rows unknown: the Translator traces once per
  # width), on the shared cache.
  assert steps == {(None, True)}, steps
  for shared in (True, False):
    shrunk, steps = translate(2, shared)
    # Shrinking, the search also has steps over 4 and 2 sentences (a loop per size, traced
    # with its rows), on the shared cache or the tiled one.
    assert steps == ({(8, True), (24, True), (12, True), (6, True)} if shared else
                     {(24, False), (12, False), (6, False)}), steps
    for full_line, shrunk_line in zip(full, shrunk):
      assert [ids for ids, _ in shrunk_line] == [ids for ids, _ in full_line]
      np.testing.assert_allclose([s for _, s in shrunk_line], [s for _, s in full_line], rtol=1e-5)


def test_a_constrained_search_shrinks_alike():
  # The parsing constraint's state (per hypothesis: depth, counts, the source's pieces) moves with
  # the rows: three sentences with limits 12, 16 and 9, the batch shrinking 3 -> 2 -> 1, give the
  # whole batch's trees and scores.
  from test_constraints import SOURCES, VOCAB as TREE_VOCAB, copy_constraint, random_model
  constraint = copy_constraint()
  limits = np.array([12, 16, 9], "int32")
  state = constraint.initial_state(SOURCES, limits)
  for seed in range(2):
    fn, _ = random_model(seed)
    runs = [beam_search(fn, {}, 3, 4, TREE_VOCAB, 16, alpha=0.6, decode_lengths=limits,
                        constraint=constraint, constraint_state=state, batch_sizes=sizes)
            for sizes in (None, shrinking.batch_sizes(3, 1))]
    (full_ids, full_scores), (ids, scores) = [(numpy(i), numpy(s)) for i, s in runs]
    np.testing.assert_array_equal(ids, full_ids)
    np.testing.assert_array_equal(scores, full_scores)
    assert np.isfinite(scores[:, 0]).all()
