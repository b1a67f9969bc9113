"""The search's self-attention cache grows in phases (16, 32, 64, ... positions): the same state,
outputs and stopping as one cache sized for the longest output, only shorter early steps.

The reference is the one-phase search (one loop over a cache of max_decode_length positions),
on a random Transformer whose EOS logit rises with the step from a per-sentence offset, so
outputs of one padded batch end at mixed lengths on both sides of the phase boundaries (16, 32).
"""

import keras
import numpy as np
import pytest
from keras import ops

from t2t_lite.decoding.beam_search import beam_search, run_beam_search
from t2t_lite.decoding.sampling import cache_phases, check_cache_phases, sampling_loop, sampling_search
from t2t_lite.token_ids import EOS_ID
from test_beam_search import compiled  # tf.function or jax.jit, as the backend compiles

VOCAB = 10
# Three sources of different lengths, padded (0) to one width; EOS (1) ends each.
SOURCES = np.array([[3, 4, 5, 1, 0, 0, 0, 0],
                    [6, 7, 8, 9, 3, 4, 5, 1],
                    [5, 6, 1, 0, 0, 0, 0, 0]], "int32")
LIMITS = np.array([14, 50, 40], "int32")   # each sentence's output limit (EOS included)
EOS_FROM = np.array([8, 38, 22], "float32")  # the step from which EOS gains on every other token
MAX_LENGTH = 50                              # phases (16, 32, 50)


def tiny_transformer(seed=0):
  from t2t_lite.hparams import ModelConfig
  from t2t_lite.models import transformer
  keras.utils.set_random_seed(seed)
  config = ModelConfig(hidden_size=16, filter_size=32, num_heads=2, num_encoder_layers=1,
                       num_decoder_layers=2, layer_prepostprocess_dropout=0.0,
                       attention_dropout=0.0, relu_dropout=0.0)
  model = transformer.Transformer(config, vocab_size=VOCAB)
  model.build()
  return model


def self_cache_length(cache):
  """The positions of the model's self-attention cache: [B, H, L, d] keys of the first layer (a
  cache shared by the beams: its lineage's L; its values are [B, H, L * beam, d])."""
  if "lineage" in cache:
    return int(cache["lineage"].shape[1])
  return int(cache["decoder"]["layer_0"]["self"]["k"].shape[2])


def eos_rising(model, rows_per_sentence, seen, source_rows=None):
  """`decode_step` with the EOS logit raised by (step - EOS_FROM of the row's sentence); records
  the self-attention cache lengths it is traced (or run) with in `seen`."""
  per_sentence = EOS_FROM if source_rows is None else source_rows
  eos_from = ops.convert_to_tensor(np.repeat(per_sentence, rows_per_sentence))     # [rows]
  is_eos = ops.arange(VOCAB) == EOS_ID                                              # [V]

  def decode_step(ids, step, cache, **kwargs):
    seen.append(self_cache_length(cache))
    logits, cache = model.decode_step(ids, step, cache, **kwargs)
    # A beam search's step 0 on a shared cache runs one row per sentence (`shared_start`).
    rows_from = ops.convert_to_tensor(per_sentence) if kwargs.get("shared_start") else eos_from
    bonus = 2.0 * (ops.cast(step, "float32") - rows_from)                           # [rows]
    return ops.where(is_eos[None, :], logits + bonus[:, None], logits), cache       # [rows, V]
  return decode_step


def extend_self_attention(cache, length):
  """The model's whole cache with its self-attention keys/values padded to `length` positions."""
  pad = lambda t: ops.pad(t, [(0, 0), (0, 0), (0, length - t.shape[2]), (0, 0)])  # noqa: E731
  return {"source_mask": cache["source_mask"],
          "decoder": {name: {"self": {key: pad(t) for key, t in layer["self"].items()},
                             "memory": layer["memory"]}
                      for name, layer in cache["decoder"].items()}}


def output_length(ids):
  ids = [int(i) for i in ids]
  return ids.index(EOS_ID) + 1 if EOS_ID in ids else len(ids)


# ---------------------------------------------------------------------------- the schedule


def test_cache_phases_double_from_16_without_a_tiny_last_phase():
  assert cache_phases(66) == (16, 32, 66)           # Multi30k: a width-16 bucket + 50
  assert cache_phases(114) == (16, 32, 64, 114)     # width 64 + 50
  assert cache_phases(306) == (16, 32, 64, 128, 306)
  assert cache_phases(50) == (16, 32, 50)
  assert cache_phases(48) == (16, 32, 48)
  assert cache_phases(47) == (16, 47)               # 32 would leave a last phase of 15 steps
  assert cache_phases(24) == (16, 24)
  assert cache_phases(20) == (20,) and cache_phases(16) == (16,) and cache_phases(1) == (1,)
  for n in range(1, 600):
    lengths = cache_phases(n)
    assert lengths[-1] == n and list(lengths) == sorted(set(lengths))
    assert all(3 * short <= 2 * long for short, long in zip(lengths, lengths[1:]))
  assert cache_phases(ops.convert_to_tensor(66)) is None  # a length unknown when traced


def test_bad_phases_are_explained():
  extend = lambda cache, length: cache  # noqa: E731
  with pytest.raises(ValueError, match="increasing Python ints"):
    check_cache_phases((32, 16, 50), extend, 50)
  with pytest.raises(ValueError, match="increasing Python ints"):
    check_cache_phases((), extend, 50)
  with pytest.raises(ValueError, match="must end at max_decode_length"):
    check_cache_phases((16, 32), extend, 50)
  with pytest.raises(ValueError, match="must end at max_decode_length"):
    check_cache_phases((16, 50), extend, ops.convert_to_tensor(50))
  with pytest.raises(ValueError, match="needs extend_cache"):
    check_cache_phases((16, 50), None, 50)
  check_cache_phases((50,), None, 50)
  check_cache_phases(None, None, ops.convert_to_tensor(50))
  with pytest.raises(ValueError, match="needs extend_cache"):
    beam_search(lambda ids, step, cache: (None, cache), {}, 1, 2, 5, 50, cache_lengths=(16, 50))


# ---------------------------------------------------------------------------- the search


def run_search(kind, model, lengths):
  """The final state (beam, greedy) or outputs (sampling) of `kind` with cache phases `lengths`
  (None: one phase of MAX_LENGTH), compiled; and the cache lengths the model saw and the lengths
  the cache was extended to."""
  beam = 4 if kind == "beam" else 1
  seen, extended = [], []
  decode_step = eos_rising(model, beam, seen)

  def extend(cache, length):
    extended.append(length)
    return extend_self_attention(cache, length)

  def search(source):
    memory, source_mask = model.encode(source)
    cache = model.init_cache(memory, source_mask, lengths[0] if lengths else MAX_LENGTH)
    phases = {"cache_lengths": lengths, "extend_cache": extend}
    if kind == "beam":
      return run_beam_search(decode_step, cache, 3, beam, VOCAB, MAX_LENGTH, decode_lengths=LIMITS,
                             **phases)
    if kind == "greedy":
      return sampling_loop(decode_step, cache, 3, MAX_LENGTH,
                           lambda logits, step: ops.argmax(logits, axis=-1),
                           decode_lengths=LIMITS, **phases)
    return sampling_search(decode_step, cache, 3, MAX_LENGTH, temperature=0.7, seed=5,
                           decode_lengths=LIMITS, **phases)
  result = compiled(search)(SOURCES)
  return keras.tree.map_structure(ops.convert_to_numpy, result), seen, extended


def assert_same_state(phased, one_phase):
  """Every field but the cache (which the phased search does not return) equal: integers and
  booleans exactly, floats (log-probabilities, scores) within float noise (the masked slots add
  exact zeros; the sums' order may differ)."""
  assert phased.cache == {}
  for name, a, b in zip(phased._fields, phased, one_phase):
    if name == "cache":
      continue
    for x, y in zip(keras.tree.flatten(a), keras.tree.flatten(b)):
      assert x.shape == y.shape, name
      if x.dtype.kind == "f":
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5, err_msg=name)
      else:
        np.testing.assert_array_equal(x, y, err_msg=name)


@pytest.mark.backend_independent
@pytest.mark.parametrize("kind", ["beam", "greedy", "sampling"])
def test_phased_search_equals_one_phase(kind):
  model = tiny_transformer()
  phased, seen, extended = run_search(kind, model, cache_phases(MAX_LENGTH))
  one_phase, seen_once, extended_once = run_search(kind, model, None)
  # The phases happen: the loop of each phase sees its own cache length, grown in between.
  assert extended == [32, 50] and sorted(set(seen)) == [16, 32, 50]
  assert extended_once == [] and set(seen_once) == {50}
  if kind == "sampling":
    ids, scores = phased
    np.testing.assert_array_equal(ids, one_phase[0])
    np.testing.assert_allclose(scores, one_phase[1], rtol=1e-5, atol=1e-5)
    best = ids
  else:
    assert_same_state(phased, one_phase)  # the step count (stopping) included
    best = phased.finished_ids[:, 0, 1:] if kind == "beam" else phased.ids[:, 1:]
    assert int(phased.step) > 32
  lengths = [output_length(row) for row in best]
  # The outputs end in every phase: <= 16, in (16, 32], > 32.
  assert min(lengths) <= 16 and any(16 < n <= 32 for n in lengths) and max(lengths) > 32, lengths


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="eager TF runs the loop in Python")
def test_each_step_runs_with_the_cache_of_its_phase():
  """Run eagerly, step by step: steps 0-15 see 16 positions, 16-31 see 32, 32 and on 50; the
  search stops at the same step as the one-phase search."""
  model = tiny_transformer()
  memory, source_mask = model.encode(SOURCES)
  steps = {}
  for lengths in ((16, 32, 50), (50,)):
    seen = []
    decode_step = eos_rising(model, 4, seen)
    stepped = []

    def recording(ids, step, cache, decode_step=decode_step, stepped=stepped):
      stepped.append(int(step))
      return decode_step(ids, step, cache)
    state = run_beam_search(recording, model.init_cache(memory, source_mask, lengths[0]), 3, 4,
                            VOCAB, MAX_LENGTH, decode_lengths=LIMITS, cache_lengths=lengths,
                            extend_cache=extend_self_attention)
    assert stepped == list(range(int(state.step)))
    assert seen == [next(n for n in lengths if n > step) for step in stepped]
    steps[lengths] = int(state.step)
  assert steps[(16, 32, 50)] == steps[(50,)] > 32


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="eager TF runs the loop in Python")
def test_a_search_done_early_runs_no_step_in_the_later_phases():
  """Every sentence ends within the first phase: no step runs with a longer cache, the cache is
  never grown, and the state is the one-phase search's."""
  model = tiny_transformer()
  memory, source_mask = model.encode(SOURCES)
  limits = np.array([5, 9, 12], "int32")
  states, seen, extended = {}, {}, []

  def extend(cache, length):
    extended.append(length)
    return extend_self_attention(cache, length)

  for lengths in ((16, 32, 50), (50,)):
    seen[lengths] = []
    states[lengths] = run_beam_search(
        eos_rising(model, 4, seen[lengths]), model.init_cache(memory, source_mask, lengths[0]), 3,
        4, VOCAB, MAX_LENGTH, decode_lengths=limits, cache_lengths=lengths, extend_cache=extend)
  assert set(seen[(16, 32, 50)]) == {16} and int(states[(50,)].step) == 12 and extended == []
  as_numpy = lambda state: keras.tree.map_structure(ops.convert_to_numpy, state)  # noqa: E731
  assert_same_state(as_numpy(states[(16, 32, 50)]), as_numpy(states[(50,)]))


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="counts with a tf.Variable")
@pytest.mark.parametrize("kind, xla", [("beam", True), ("greedy", False)], ids=["beam-xla", "greedy-graph"])
def test_a_compiled_search_done_early_skips_the_later_phases(kind, xla):
  """Compiled (XLA, or a graph): once every sentence is done, no later phase runs (counted when
  the search runs: the cache is never grown) and the state is the one-phase search's; outputs
  that reach the last phase grow it twice."""
  import tensorflow as tf

  from t2t_lite.graph_functions import graph_function
  model = tiny_transformer()
  beam = 4 if kind == "beam" else 1
  grown = tf.Variable(0)

  def extend(cache, length):
    grown.assign_add(1)
    return extend_self_attention(cache, length)

  def search(source, limits, lengths):
    memory, source_mask = model.encode(source)
    cache = model.init_cache(memory, source_mask, lengths[0] if lengths else MAX_LENGTH)
    phases = {"decode_lengths": limits, "cache_lengths": lengths, "extend_cache": extend}
    if kind == "beam":
      return run_beam_search(eos_rising(model, beam, []), cache, 3, beam, VOCAB, MAX_LENGTH, **phases)
    return sampling_loop(eos_rising(model, beam, []), cache, 3, MAX_LENGTH,
                         lambda logits, step: ops.argmax(logits, axis=-1), **phases)

  phased = graph_function(lambda source, limits: search(source, limits, cache_phases(MAX_LENGTH)),
                          jit_compile=xla)
  one_phase = graph_function(lambda source, limits: search(source, limits, None), jit_compile=xla)
  as_numpy = lambda state: keras.tree.map_structure(ops.convert_to_numpy, state)  # noqa: E731
  early = np.array([5, 9, 12], "int32")
  state = as_numpy(phased(SOURCES, early))
  assert int(grown.numpy()) == 0 and int(state.step) == 12
  assert_same_state(state, as_numpy(one_phase(SOURCES, early)))
  assert int(as_numpy(phased(SOURCES, LIMITS)).step) > 32 and int(grown.numpy()) == 2


# ---------------------------------------------------------------------------- the search graph


def tree_constraint():
  """The parsing problems' constraint on a toy vocabulary: 2, 3 open a bracket, 4 closes one,
  5 is the leaf; 6-8 begin a word, 9 continues one. One leaf per source word."""
  from t2t_lite.parsing.constraint import TreeConstraint
  return TreeConstraint(vocab_size=VOCAB, open_ids=[2, 3], close_ids=[4], leaf_ids=[5],
                        word_start_ids=[6, 7, 8])


def padded(rows):
  batch = np.zeros((len(rows), max(map(len, rows))), "int32")
  for i, row in enumerate(rows):
    batch[i, :len(row)] = row
  return batch


# Sources of 4, 15 and 32 words (6-8 begin a word, 9 continues one; a tree over each has at
# least words + 3 tokens: > 16 and > 32 for the last two), padded to one width (43), and their
# sentences' EOS offsets for the unconstrained model (outputs limited to length + 20).
GRAPH_SOURCES = padded([[6, 9, 7, 8, 6, 1],
                        [6, 7, 8] * 5 + [9, 1],
                        [6, 7, 8, 9] * 10 + [6, 7, 1]])
GRAPH_EOS_FROM = np.array([6, 20, 40], "float32")


# Every pair of the three switches' values, in 4 runs rather than the 8 of the cross product
# (each is a compilation). The translation's own case, free beam 4 under XLA, also runs on a
# trained model in tests/test_bench_model_dir.py (phases against one phase, outputs equal).
@pytest.mark.parametrize("constrained, beam_size, xla", [
    (True, 4, True), (False, 1, True), (False, 4, False), (True, 1, False)],
    ids=["tree-4-xla", "free-1-xla", "free-4-graph", "tree-1-graph"])
def test_search_graph_phases_equal_one_phase(monkeypatch, xla, beam_size, constrained):
  """`make_search_fn` (the decoder's, dev BLEU's, the SavedModel's and the server's search) with
  `cache_phases` on and off: the same ids, scores within float noise, XLA and graph, beam and
  greedy, free and under the parsing constraint; with phases the early steps see short caches."""
  from t2t_lite.decoding import translator
  from t2t_lite.graph_functions import graph_function
  from t2t_lite.hparams import DecodeHParams
  model = tiny_transformer(seed=1)
  extended, extend = [], translator.extend_cache

  def recording_extend(growing, length):
    extended.append(length)
    return extend(growing, length)
  monkeypatch.setattr(translator, "extend_cache", recording_extend)

  class EosRising:
    vocab_size = model.vocab_size
    encode, init_cache, output_projection = model.encode, model.init_cache, model.output_projection

    def __init__(self):
      self.seen = []
      self.decode_step = eos_rising(model, beam_size, self.seen, GRAPH_EOS_FROM)

  results, seen = {}, {}
  for phases in (True, False):
    extended.clear()
    fake = EosRising()
    dh = DecodeHParams(beam_size=beam_size, alpha=0.6, extra_length=20, xla=xla,
                       cache_phases=phases)
    search = translator.make_search_fn(fake, dh, 1024, tree_constraint() if constrained else None)
    ids, scores = (t.numpy() for t in graph_function(search, jit_compile=xla)(GRAPH_SOURCES))
    results[phases], seen[phases] = (ids, scores), (sorted(set(fake.seen)), list(extended))
  max_length = GRAPH_SOURCES.shape[1] + 20                                       # 63
  assert seen[True] == ([16, 32, max_length], [32, max_length])
  assert seen[False] == ([max_length], [])
  np.testing.assert_array_equal(results[True][0], results[False][0])
  np.testing.assert_allclose(results[True][1], results[False][1], rtol=1e-5, atol=1e-5)
  lengths = [output_length(row) for row in results[True][0][:, 0]]
  assert lengths[1] > 16 and lengths[2] > 32, lengths
  if constrained:  # every sentence finished a tree with one leaf per source word
    assert np.isfinite(results[True][1][:, 0]).all()
    words = np.isin(GRAPH_SOURCES, [6, 7, 8]).sum(axis=1)
    assert [int((row == 5).sum()) for row in results[True][0][:, 0]] == list(words)
  else:
    assert lengths[0] <= 16 and lengths[1] <= 32, lengths


@pytest.mark.parametrize("beam_size", [4, 1], ids=["beam4", "greedy"])
def test_search_graph_stops_each_sentence_at_its_source_length_plus_extra_length(beam_size):
  """`make_search_fn`'s per-sentence limit, against the sources' own lengths: a model that never
  writes EOS (nor PAD) fills every sentence's output up to exactly its source length (EOS
  included) + extra_length tokens, 8, 14 and 11 here, below the buffers' 12 + 5 = 17; the tests
  above compare searches that share the limit, so an off-by-one in it passes them."""
  from t2t_lite.decoding import translator
  from t2t_lite.graph_functions import graph_function
  from t2t_lite.hparams import DecodeHParams
  model = tiny_transformer(seed=1)
  sources = padded([[6, 7, 1], [6, 7, 8, 9, 6, 7, 8, 9, 1], [8, 7, 6, 9, 6, 1]])
  sources = np.pad(sources, [(0, 0), (0, 12 - sources.shape[1])])                 # width 12
  lengths = (sources != 0).sum(axis=1)                                             # 3, 9, 6
  never_ends = ops.convert_to_tensor(np.isin(np.arange(VOCAB), [0, EOS_ID]))      # [V]

  class NeverEnds:
    vocab_size = model.vocab_size
    encode, init_cache, output_projection = model.encode, model.init_cache, model.output_projection

    def decode_step(self, ids, step, cache, **kwargs):
      logits, cache = model.decode_step(ids, step, cache, **kwargs)
      return ops.where(never_ends[None, :], -1e9, logits), cache

  dh = DecodeHParams(beam_size=beam_size, alpha=0.6, extra_length=5, xla=False)
  ids, scores = (t.numpy() for t in graph_function(
      translator.make_search_fn(NeverEnds(), dh, 1024))(sources))
  assert ids.shape == (3, beam_size, 17) and np.isfinite(scores).all()
  for row, length in zip(ids, lengths):
    assert ((row != 0).sum(axis=1) == length + 5).all(), row
    assert not row[:, length + 5:].any()


def test_extend_cache_appends_zero_positions():
  """The search graph's `extend_cache`: [B, H, L, d] self-attention keys and values of every
  layer padded with zero positions on axis 2, the others untouched."""
  from t2t_lite.decoding.translator import extend_cache
  rng = np.random.default_rng(0)
  growing = {f"layer_{i}": {"k": rng.normal(size=(6, 2, 16, 4)).astype("float32"),
                            "v": rng.normal(size=(6, 2, 16, 3)).astype("float32")} for i in range(2)}
  grown = extend_cache(growing, 40)
  for name, layer in growing.items():
    for key, before in layer.items():
      after = ops.convert_to_numpy(grown[name][key])
      assert after.shape == before.shape[:2] + (40,) + before.shape[3:]
      np.testing.assert_array_equal(after[:, :, :16], before)
      assert not after[:, :, 16:].any()

