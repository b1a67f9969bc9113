"""Per-row decoding steps (`Transformer.decode_step(ids, step [B], cache)`): rows of one batch at
different positions, as in a search that refills a finished row with a new sentence at step 0.

The reference is independent of the cache: the teacher-forced full model (`model(...)`) at each
row's position, and each row decoded alone with the scalar-step path. Runs on either backend
(`KERAS_BACKEND=jax python -m pytest tests/test_per_row_steps.py`)."""

import functools
import importlib

import keras
import numpy as np
import pytest
from keras import ops

from t2t_lite.hparams import ModelConfig
from t2t_lite.layers import masks
from t2t_lite.models import Transformer

pytestmark = pytest.mark.backend_independent

VOCAB = 23
TINY = ModelConfig(hidden_size=16, filter_size=32, num_heads=4, num_encoder_layers=2,
                   num_decoder_layers=2, layer_prepostprocess_dropout=0.0, attention_dropout=0.0,
                   relu_dropout=0.0)
SOURCE = np.array([[3, 4, 5, 6, 1, 0, 0], [7, 8, 9, 10, 11, 12, 1], [5, 9, 1, 0, 0, 0, 0]], "int32")
TARGETS = np.array([[13, 14, 15, 1, 0, 0], [16, 17, 18, 19, 20, 1], [21, 22, 1, 0, 0, 0]], "int32")
# What each row decodes before it is "refilled" with its own sentence (another source, other
# tokens), and for how many steps: row 0 starts at once, row 1 after 2 steps, row 2 after 5.
OTHER_SOURCE = np.array([[9, 8, 7, 1, 0, 0, 0], [4, 4, 4, 4, 4, 4, 1], [12, 11, 10, 9, 8, 7, 1]],
                        "int32")
OTHER_TOKENS = np.array([[2, 3, 4, 5, 6], [7, 8, 9, 10, 11], [12, 13, 14, 15, 16]], "int32")
OFFSETS = np.array([0, 2, 5], "int32")
CACHE_LENGTH = 8  # > every position written: the targets' 6 and the other tokens' 5
CONFIGS = {"sinusoid_pre": {}, "sinusoid_post": {"norm_type": "post"},
           "learned_pre": {"position_encoding": "learned", "max_position": 16},
           "paper_post": {"position_encoding": "sinusoid_paper", "norm_type": "post"}}


@functools.cache
def make_model(name):
  keras.utils.set_random_seed(7)
  model = Transformer(TINY.replace(**CONFIGS[name]), VOCAB, dtype="float32")  # whatever the policy
  model({"inputs": SOURCE, "targets": TARGETS})
  return model


@pytest.fixture(params=list(CONFIGS))
def model(request):
  return make_model(request.param)


def to_np(x):
  return ops.convert_to_numpy(x)


def shifted(targets):
  return np.concatenate([np.zeros_like(targets[:, :1]), targets[:, :-1]], axis=1)


def where_rows(rows, a, b):
  """Per leaf: row i of `a` where rows[i], else of `b` (a refill's gather, in miniature)."""
  def pick(x, y):
    return ops.where(ops.reshape(rows, (-1,) + (1,) * (len(x.shape) - 1)), x, y)
  return keras.tree.map_structure(pick, a, b)


def refill_run(model, compile_fn=None):
  """Decodes all rows in one batch with a step per row: row b first decodes OTHER_TOKENS against
  OTHER_SOURCE at positions 0 .. OFFSETS[b] - 1, then its own shifted TARGETS against SOURCE
  from position 0, the self-attention cache not cleared (the causal mask must hide what the
  other sentence left). Returns the logits of every row's own positions [B, T, V]."""
  inputs, other_tokens = shifted(TARGETS), OTHER_TOKENS
  total = int(OFFSETS.max()) + TARGETS.shape[1]

  def run(source, other_source, inputs, other_tokens, offsets):
    own = model.init_cache(*model.encode(source), CACHE_LENGTH)
    other = model.init_cache(*model.encode(other_source), CACHE_LENGTH)
    growing = {name: layer["self"] for name, layer in own["decoder"].items()}

    def body(k, state):
      growing, logits_by_step = state
      refilled = offsets <= k                                                       # [B]
      step = ops.where(refilled, k - offsets, k)                                    # [B]
      position = ops.minimum(ops.maximum(step, 0), inputs.shape[1] - 1)
      other_position = ops.minimum(step, other_tokens.shape[1] - 1)
      ids = ops.where(refilled, ops.take_along_axis(inputs, position[:, None], 1)[:, 0],
                      ops.take_along_axis(other_tokens, other_position[:, None], 1)[:, 0])
      fixed = where_rows(refilled, own, other)
      cache = {"source_mask": fixed["source_mask"],
               "decoder": {name: {"self": growing[name], "memory": layer["memory"]}
                           for name, layer in fixed["decoder"].items()}}
      logits, cache = model.decode_step(ids, ops.cast(step, "int32"), cache)
      return ({name: layer["self"] for name, layer in cache["decoder"].items()},
              ops.slice_update(logits_by_step, (0, k, 0), logits[:, None]))

    logits_by_step = ops.zeros((len(OFFSETS), total, VOCAB), "float32")
    return ops.fori_loop(0, total, body, (growing, logits_by_step))[1]             # [B, K, V]

  run = compile_fn(run) if compile_fn else run
  by_step = to_np(run(*(ops.convert_to_tensor(x) for x in (SOURCE, OTHER_SOURCE, inputs,
                                                             other_tokens, OFFSETS))))
  return np.stack([by_step[b, OFFSETS[b]:OFFSETS[b] + TARGETS.shape[1]]
                   for b in range(len(OFFSETS))])


def scalar_alone(model, b):
  """Row b decoded alone with the scalar-step path: [T, V]."""
  cache = model.init_cache(*model.encode(SOURCE[b:b + 1]), CACHE_LENGTH)
  inputs, rows = shifted(TARGETS)[b:b + 1], []
  for t in range(TARGETS.shape[1]):
    logits, cache = model.decode_step(inputs[:, t], t, cache)
    rows.append(to_np(logits)[0])
  return np.stack(rows)


def compiler(xla):
  backend = keras.backend.backend()
  if backend == "jax":
    return importlib.import_module("jax").jit
  graph_function = importlib.import_module("t2t_lite.graph_functions").graph_function
  return lambda fn: graph_function(fn, jit_compile=xla)


def test_rows_at_different_steps_match_teacher_forcing_and_scalar_decoding(model):
  refilled = refill_run(model)
  teacher_forced = to_np(model({"inputs": SOURCE, "targets": TARGETS}))
  np.testing.assert_allclose(refilled, teacher_forced, rtol=1e-5, atol=1e-5)
  for b in range(len(SOURCE)):
    np.testing.assert_allclose(refilled[b], scalar_alone(model, b), rtol=1e-5, atol=1e-5)


# Compiling costs seconds: graph mode (the SavedModel's) once, XLA for the other layouts.
@pytest.mark.parametrize("name, xla", [("sinusoid_pre", False), ("sinusoid_pre", True),
                                       ("learned_pre", True), ("paper_post", True)])
def test_compiled_per_row_steps_match_teacher_forcing(name, xla):
  if xla and keras.backend.backend() == "jax":
    pytest.skip("jax.jit is XLA already: covered by the graph case")
  model = make_model(name)
  teacher_forced = to_np(model({"inputs": SOURCE, "targets": TARGETS}))
  np.testing.assert_allclose(refill_run(model, compiler(xla)), teacher_forced, rtol=1e-5,
                             atol=1e-5)


def test_same_step_for_every_row_equals_scalar_step(model):
  cache = model.init_cache(*model.encode(SOURCE), CACHE_LENGTH)
  vector_cache, inputs = cache, shifted(TARGETS)
  for t in range(4):
    logits, cache = model.decode_step(inputs[:, t], t, cache)
    vector_logits, vector_cache = model.decode_step(
        inputs[:, t], np.full(len(SOURCE), t, "int32"), vector_cache)
    np.testing.assert_allclose(to_np(vector_logits), to_np(logits), rtol=1e-6, atol=1e-6)
  for a, b in zip(keras.tree.flatten(vector_cache), keras.tree.flatten(cache)):
    np.testing.assert_array_equal(to_np(a), to_np(b))


def test_causal_mask_per_row_against_numpy():
  offsets = np.array([0, 3, 5], "int32")
  got = to_np(masks.causal_mask(2, 7, query_offset=offsets))
  want = np.arange(7)[None, None, :] <= (offsets[:, None] + np.arange(2)[None, :])[:, :, None]
  np.testing.assert_array_equal(got, want)


def test_position_encodings_per_row_equal_scalar_positions(model):
  embedded = keras.random.normal((3, 1, TINY.hidden_size))
  starts = np.array([4, 0, 2], "int32")
  per_row = to_np(model.position(embedded, start_index=starts))
  for b, start in enumerate(starts):
    np.testing.assert_array_equal(per_row[b], to_np(model.position(embedded[b:b + 1],
                                                                   start_index=int(start)))[0])


def test_bad_step_shape_is_explained(model):
  cache = model.init_cache(*model.encode(SOURCE), CACHE_LENGTH)
  with pytest.raises(ValueError, match="one position per row"):
    model.decode_step(np.zeros(3, "int32"), np.zeros((3, 1), "int32"), cache)
  with pytest.raises(ValueError, match="one position per row"):
    model.decode_step(np.zeros(3, "int32"), np.zeros(2, "int32"), cache)


@pytest.mark.backend_independent
def test_row_slices_write_what_the_select_writes():
  """`write_row_slices` (a slice per row, in place) against numpy and the select it replaces for
  one position (`write_rows`, `write_group_rows`): rows at their own steps, those at or past the
  cache's end not written; plain [B, H, L, d] and a group's keys transposed [B, H, d, L * g]."""
  from t2t_lite.layers.multi_head_attention import write_group_rows, write_row_slices, write_rows
  rng = np.random.default_rng(0)
  rows, heads, length, depth, groups = 5, 2, 6, 3, 4
  step = np.array([0, 3, 5, 6, 9], "int32")
  cache = rng.normal(size=(rows, heads, length, depth)).astype("float32")
  new = rng.normal(size=(rows, heads, 1, depth)).astype("float32")
  expected = cache.copy()
  for b in range(rows):
    if step[b] < length:
      expected[b, :, step[b]] = new[b, :, 0]
  np.testing.assert_array_equal(
      ops.convert_to_numpy(write_row_slices([cache], [new], step, [2])[0]), expected)
  np.testing.assert_array_equal(ops.convert_to_numpy(write_rows(cache, new, step)), expected)

  keys = rng.normal(size=(rows, heads, depth, length * groups)).astype("float32")
  group_new = rng.normal(size=(rows, heads, 1, groups, depth)).astype("float32")  # [B, H, T, g, d]
  expected = keys.copy()
  for b in range(rows):
    if step[b] < length:
      expected[b, :, :, step[b] * groups:(step[b] + 1) * groups] = np.swapaxes(group_new[b, :, 0], 1, 2)
  columns = np.transpose(group_new, (0, 1, 4, 2, 3))[:, :, :, 0]                    # [B, H, d, g]
  np.testing.assert_array_equal(
      ops.convert_to_numpy(write_row_slices([keys], [columns], step * groups, [3])[0]), expected)
  np.testing.assert_array_equal(ops.convert_to_numpy(
      write_group_rows(keys, group_new, np.repeat(step, groups), keys_transposed=True)), expected)
