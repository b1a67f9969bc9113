"""The beam search's cache shared by the beams of a sentence (decode hparam `shared_beam_cache`):
the encoder-decoder keys/values once per sentence, one self-attention cache where each
hypothesis writes its own row, and a lineage that alone follows the beams.

The reference is the tiled cache of the old search: every hypothesis its own copy of the memory
and of its history's keys/values, reordered with `gather_beams` after every step. Step by step
(random tokens, random reorders, a step per row), `decode_step` on both must give the same
logits; whole searches the same ids and scores.
"""

import keras
import numpy as np
import pytest
from keras import ops

from t2t_lite.decoding import translator
from t2t_lite.decoding.beam_search import gather_beams, tile_to_beams
from test_cache_phases import (GRAPH_SOURCES, eos_rising, output_length, tiny_transformer,
                               tree_constraint)

SENTENCES, BEAMS, STEPS, CACHE = 3, 4, 7, 8
SOURCE = np.array([[3, 4, 5, 1, 0, 0], [6, 7, 8, 9, 3, 1], [5, 6, 1, 0, 0, 0]], "int32")


def steps_and_reorders(seed=0):
  """Each step's tokens [B * beam] and the old beam each new hypothesis continues [B, beam]."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(2, 10, (STEPS, SENTENCES * BEAMS)).astype("int32")
  reorders = rng.integers(0, BEAMS, (STEPS, SENTENCES, BEAMS)).astype("int32")
  return tokens, reorders


def run_steps(model, shared, per_row):
  """Logits [STEPS, B * beam, V] of `decode_step` over the tiled or the shared cache, the
  hypotheses reordered after every step; `per_row`: a step per row, sentence b starting b steps
  late (its rows repeat step 0 meanwhile, as a refilled slot's would)."""
  tokens, reorders = steps_and_reorders()
  memory, source_mask = model.encode(SOURCE)
  if shared:
    growing, fixed = translator.split_cache(
        model.init_cache(memory, source_mask, CACHE, BEAMS))
    reorder = lambda cache, beams: translator.reorder_lineage(cache, beams, BEAMS)  # noqa: E731
  else:
    growing, fixed = translator.split_cache(model.init_cache(memory, source_mask, CACHE))
    growing, fixed = tile_to_beams(growing, BEAMS), tile_to_beams(fixed, BEAMS)
    reorder = lambda cache, beams: gather_beams(cache, beams, BEAMS)  # noqa: E731
  logits_per_step = []
  for t in range(STEPS):
    step = t
    if per_row:
      step = np.repeat(np.maximum(t - np.arange(SENTENCES), 0), BEAMS).astype("int32")
    logits, cache = model.decode_step(tokens[t], step, translator.join_cache(growing, fixed))
    growing = reorder(translator.split_cache(cache)[0], reorders[t])
    logits_per_step.append(ops.convert_to_numpy(logits))
  return np.stack(logits_per_step)


@pytest.mark.backend_independent
@pytest.mark.parametrize("per_row", [False, True], ids=["step", "step_per_row"])
def test_decode_step_on_the_shared_cache_equals_the_tiled_cache(per_row):
  model = tiny_transformer(seed=3)
  tiled = run_steps(model, shared=False, per_row=per_row)
  shared = run_steps(model, shared=True, per_row=per_row)
  np.testing.assert_allclose(shared, tiled, rtol=1e-5, atol=1e-5)
  # The reorders matter: the hypotheses' histories differ, and so do their logits.
  assert np.abs(tiled[-1] - tiled[-1][:1]).max() > 1e-3


@pytest.mark.backend_independent
def test_lineage_and_extend_cache():
  """`decode_step` writes each row's own index at its step; the phases' `extend_cache` grows the
  shared keys/values to length * beam entries and the lineage to length positions."""
  model = tiny_transformer(seed=3)
  memory, source_mask = model.encode(SOURCE)
  cache = model.init_cache(memory, source_mask, CACHE, BEAMS)
  layer = cache["decoder"]["layer_0"]
  # The keys transposed, memory and self-attention alike: [B, H, d, entries].
  assert tuple(layer["self"]["kt"].shape) == (SENTENCES, 2, 8, CACHE * BEAMS)
  assert tuple(layer["self"]["v"].shape) == (SENTENCES, 2, CACHE * BEAMS, 8)
  assert tuple(layer["memory"]["kt"].shape) == (SENTENCES, 2, 8, SOURCE.shape[1])
  tiled = model.init_cache(*tile_to_beams([memory, source_mask], BEAMS), CACHE)
  np.testing.assert_allclose(
      ops.convert_to_numpy(layer["memory"]["kt"]),
      np.swapaxes(ops.convert_to_numpy(tiled["decoder"]["layer_0"]["memory"]["k"]), 2, 3)[::BEAMS],
      rtol=1e-6, atol=1e-6)
  ids = np.arange(SENTENCES * BEAMS, dtype="int32") % 5 + 2
  _, cache = model.decode_step(ids, 3, cache)
  _, tiled = model.decode_step(ids, 3, tiled)
  # Row j of sentence b wrote position 3 at entry 3 * BEAMS + j, the key the tiled cache's row
  # b * BEAMS + j holds at position 3.
  written = ops.convert_to_numpy(cache["decoder"]["layer_1"]["self"]["kt"])[..., 3 * BEAMS:4 * BEAMS]
  expected = ops.convert_to_numpy(tiled["decoder"]["layer_1"]["self"]["k"])[:, :, 3]     # [B*g, H, d]
  expected = np.transpose(expected.reshape(SENTENCES, BEAMS, 2, 8), (0, 2, 3, 1))        # [B, H, d, g]
  np.testing.assert_allclose(written, expected, rtol=1e-5, atol=1e-5)
  lineage = ops.convert_to_numpy(cache["lineage"])
  np.testing.assert_array_equal(lineage[:, 3], np.tile(np.arange(BEAMS), SENTENCES))
  assert not np.delete(lineage, 3, axis=1).any()
  growing = translator.extend_cache(translator.split_cache(cache)[0], 20)
  assert tuple(growing["layer_1"]["v"].shape) == (SENTENCES, 2, 20 * BEAMS, 8)
  assert tuple(growing["layer_1"]["kt"].shape) == (SENTENCES, 2, 8, 20 * BEAMS)
  assert tuple(growing["lineage"].shape) == (SENTENCES * BEAMS, 20)
  np.testing.assert_array_equal(ops.convert_to_numpy(growing["lineage"])[:, :CACHE], lineage)


@pytest.mark.backend_independent
def test_shared_start_is_step_0_once_per_sentence():
  """`decode_step(..., shared_start=True)` on B start tokens gives each sentence the logits of
  its hypotheses' step 0 on the tiled cache, and leaves the shared cache as that step and a
  reorder to hypothesis 0 leave it: every hypothesis then decodes step 1 as on the tiled cache."""
  model = tiny_transformer(seed=3)
  memory, source_mask = model.encode(SOURCE)
  growing, fixed = translator.split_cache(model.init_cache(memory, source_mask, CACHE, BEAMS))
  first_logits, cache = model.decode_step(np.zeros(SENTENCES, "int32"), 0,
                                          translator.join_cache(growing, fixed), shared_start=True)
  tiled = model.init_cache(*tile_to_beams([memory, source_mask], BEAMS), CACHE)
  tiled_logits, tiled = model.decode_step(np.zeros(SENTENCES * BEAMS, "int32"), 0, tiled)
  np.testing.assert_allclose(ops.convert_to_numpy(first_logits),
                             ops.convert_to_numpy(tiled_logits)[::BEAMS], rtol=1e-5, atol=1e-5)
  # Position 0 in slot 0 (entry 0) only; the lineage unchanged (zeros: slot 0 for everyone).
  written = ops.convert_to_numpy(cache["decoder"]["layer_1"]["self"]["kt"])
  np.testing.assert_allclose(
      written[..., 0], ops.convert_to_numpy(tiled["decoder"]["layer_1"]["self"]["k"])[::BEAMS, :, 0],
      rtol=1e-5, atol=1e-5)
  assert not written[..., 1:].any()
  assert not ops.convert_to_numpy(cache["lineage"]).any()
  # Step 1 for every hypothesis (all continue hypothesis 0 of their sentence) equals the tiled one.
  tiled = translator.join_cache(*[gather_beams(part, np.zeros((SENTENCES, BEAMS), "int32"), BEAMS)
                                  for part in translator.split_cache(tiled)])
  ids = np.arange(SENTENCES * BEAMS, dtype="int32") % 5 + 2
  shared_next, _ = model.decode_step(ids, 1, cache)
  tiled_next, _ = model.decode_step(ids, 1, tiled)
  np.testing.assert_allclose(ops.convert_to_numpy(shared_next), ops.convert_to_numpy(tiled_next),
                             rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="shared_start=True runs step 0 only"):
    model.decode_step(np.zeros(SENTENCES, "int32"), 1, translator.join_cache(growing, fixed),
                      shared_start=True)
  with pytest.raises(ValueError, match="cache the hypotheses share"):
    model.decode_step(np.zeros(SENTENCES, "int32"), 0,
                      model.init_cache(memory, source_mask, CACHE), shared_start=True)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="the search graph is TF's")
@pytest.mark.parametrize("xla, constrained", [(True, False), (False, True)],
                         ids=["xla-free", "graph-tree"])
def test_search_with_the_shared_cache_equals_the_tiled_search(xla, constrained):
  """`make_search_fn`, beam 4, cache phases 16, 32, 63: every beam (the n-best list) the same
  ids with `shared_beam_cache` on and off, scores within float noise; outputs end on both sides
  of the phase boundaries. On, the steps really run on the shared cache (its lineage), step 0
  once per sentence; off, on the tiled one, every step a row per hypothesis."""
  from t2t_lite.graph_functions import graph_function
  from t2t_lite.hparams import DecodeHParams
  model = tiny_transformer(seed=1)

  class EosRising:
    vocab_size = model.vocab_size
    encode, init_cache, output_projection = model.encode, model.init_cache, model.output_projection

    def __init__(self):
      self.steps = set()  # (rows, the cache has a lineage) of each step traced
      self.eos_rising = eos_rising(model, 4, [], np.array([6, 20, 40], "float32"))

    def decode_step(self, ids, step, cache, **kwargs):
      self.steps.add((ids.shape[0], "lineage" in cache))
      return self.eos_rising(ids, step, cache, **kwargs)

  results, steps = {}, {}
  for shared in (True, False):
    dh = DecodeHParams(beam_size=4, alpha=0.6, extra_length=20, xla=xla, shared_beam_cache=shared)
    fake = EosRising()
    search = translator.make_search_fn(fake, dh, 1024, tree_constraint() if constrained else None)
    compiled = graph_function(search, jit_compile=xla)
    results[shared], steps[shared] = [t.numpy() for t in compiled(GRAPH_SOURCES)], fake.steps
  # 3 sentences, 12 hypotheses: shared, step 0 on 3 rows and the others on 12, all with a lineage.
  assert steps[True] == {(3, True), (12, True)} and steps[False] == {(12, False)}, steps
  np.testing.assert_array_equal(results[True][0], results[False][0])
  np.testing.assert_allclose(results[True][1], results[False][1], rtol=1e-5, atol=1e-5)
  lengths = [output_length(row) for row in results[True][0][:, 0]]
  assert lengths[1] > 16 and lengths[2] > 32, lengths
