"""Layer tests against independent numpy implementations of the paper's formulas.

Runs on either backend: `KERAS_BACKEND=jax python -m pytest tests/test_layers.py`.
"""

import math

import keras
import numpy as np
import pytest
from keras import ops

from layer_testing import run_layer_test
from t2t_lite.hparams import ModelConfig
from t2t_lite.layers import (Decoder, DecoderLayer, Encoder, EncoderLayer, FeedForward,
                             LearnedPositionEmbedding, MultiHeadAttention, SharedEmbedding,
                             SinusoidalPositionEncoding)
from t2t_lite.layers.decoder_stack import join_layer_caches, split_layer_caches

pytestmark = pytest.mark.backend_independent

B, TQ, TK, D = 2, 5, 7, 16


def to_np(x):
  return ops.convert_to_numpy(x)


def random_array(*shape, seed=0):
  return np.random.RandomState(seed).normal(size=shape).astype("float32")


# ---- numpy references (paper section 3) -------------------------------------------------------

def np_softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def np_attention(query, memory, wq, wk, wv, wo, num_heads, mask=None):
  """MultiHead(Q, K, V) = Concat(head_1..h) W^O, head_i = softmax(QW_i (KW_i)^T / sqrt(d_k)) VW_i."""
  q, k, v = query @ wq, memory @ wk, memory @ wv
  dk, dv = wq.shape[1] // num_heads, wv.shape[1] // num_heads
  heads, weights = [], []
  for h in range(num_heads):
    scores = q[..., h * dk:(h + 1) * dk] @ k[..., h * dk:(h + 1) * dk].transpose(0, 2, 1)
    scores = scores / math.sqrt(dk)
    if mask is not None:
      scores = np.where(np.broadcast_to(mask, scores.shape), scores, -np.inf)
    w = np_softmax(scores)
    heads.append(w @ v[..., h * dv:(h + 1) * dv])
    weights.append(w)
  return np.concatenate(heads, -1) @ wo, np.stack(weights, 1)


def attention_weights_np(layer):
  """(wq, wk, wv, wo) of a MultiHeadAttention, as numpy."""
  kc = layer._key_channels
  if layer.self_attention:
    wq, wk, wv = np.split(to_np(layer.qkv_kernel), [kc, 2 * kc], axis=1)
  else:
    wq = to_np(layer.q_kernel)
    wk, wv = np.split(to_np(layer.kv_kernel), [kc], axis=1)
  return wq, wk, wv, to_np(layer.output_kernel)


def np_ffn(x, layer):
  """max(0, x W1 + b1) W2 + b2 (swish: h * sigmoid(h) in place of max(0, h))."""
  hidden = x @ to_np(layer.kernel_1) + to_np(layer.bias_1)
  hidden = hidden / (1 + np.exp(-hidden)) if layer.activation == "swish" else np.maximum(0, hidden)
  return hidden @ to_np(layer.kernel_2) + to_np(layer.bias_2)


def np_layer_norm(x, layer):
  """With the epsilon the tests configure (CONFIG's), not the one the layer holds: that the layer
  was given it is part of what is tested."""
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  epsilon = CONFIG.layer_norm_epsilon
  return (x - mean) / np.sqrt(var + epsilon) * to_np(layer.gamma) + to_np(layer.beta)


def np_sublayer(x, fn, norm, norm_type):
  return x + fn(np_layer_norm(x, norm)) if norm_type == "pre" else np_layer_norm(x + fn(x), norm)


def np_timing_signal(positions, channels, min_timescale=1.0, max_timescale=1e4, layout="concat"):
  """The paper's sin/cos encoding with T2T's timescales, written element by element. T2T's
  `get_timing_signal_1d` multiplies the frequencies by min_timescale, `inv_timescales =
  min_timescale * exp(-i * log(max / min) / (n - 1))`: 1 / (min * (max / min) ** (i / (n - 1)))
  only at min_timescale 1."""
  n = channels // 2
  signal = np.zeros((len(positions), channels))
  for row, pos in enumerate(positions):
    for i in range(n):
      angle = pos * min_timescale * (min_timescale / max_timescale) ** (i / max(n - 1, 1))
      if layout == "concat":
        signal[row, i], signal[row, n + i] = math.sin(angle), math.cos(angle)
      else:  # the paper: PE(pos, 2i) = sin, PE(pos, 2i + 1) = cos
        signal[row, 2 * i], signal[row, 2 * i + 1] = math.sin(angle), math.cos(angle)
  return signal


def np_paper_signal(positions, channels, interleave):
  """The paper's PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...), element by
  element; `interleave=False` puts the sines first (Hugging Face's Marian: `create_weight`)."""
  signal = np.zeros((len(positions), channels))
  for row, pos in enumerate(positions):
    for i in range(channels // 2):
      angle = pos / 10000 ** (2 * i / channels)
      sin_at, cos_at = (2 * i, 2 * i + 1) if interleave else (i, channels // 2 + i)
      signal[row, sin_at], signal[row, cos_at] = math.sin(angle), math.cos(angle)
  return signal


def padding_mask_np():
  """[B, TK] bool: the first example has 3 padded keys."""
  mask = np.ones((B, TK), bool)
  mask[0, 4:] = False
  return mask


# ---- MultiHeadAttention ----------------------------------------------------------------------

def test_self_attention_layer_contract():
  run_layer_test(MultiHeadAttention, dict(num_heads=4, key_channels=8, attention_dropout=0.1),
                 inputs=(random_array(B, TQ, D),),
                 call_kwargs=dict(attention_mask=np.tril(np.ones((TQ, TQ), bool))),
                 expected_output_shape=(B, TQ, D), expected_num_trainable_weights=2)


def test_encoder_decoder_attention_layer_contract():
  run_layer_test(MultiHeadAttention, dict(num_heads=2, self_attention=False),
                 inputs=(random_array(B, TQ, D), random_array(B, TK, D, seed=1)),
                 call_kwargs=dict(attention_mask=padding_mask_np()[:, None, :]),
                 expected_output_shape=(B, TQ, D), expected_num_trainable_weights=3)


@pytest.mark.parametrize("mask_kind", [None, "padding", "causal", "both"])
def test_self_attention_matches_numpy(mask_kind):
  layer = MultiHeadAttention(num_heads=4)
  x = random_array(B, TK, D)
  masks = {"padding": padding_mask_np()[:, None, :],           # [B, 1, Tk]
           "causal": np.tril(np.ones((TK, TK), bool))}         # [Tq, Tk]
  masks["both"] = masks["padding"] & masks["causal"]           # [B, Tq, Tk]
  mask = masks.get(mask_kind)
  output, weights = layer(x, attention_mask=mask, return_attention_scores=True)
  expected, expected_weights = np_attention(x, x, *attention_weights_np(layer), 4, mask)
  np.testing.assert_allclose(to_np(output), expected, atol=1e-5)
  np.testing.assert_allclose(to_np(weights), expected_weights, atol=1e-6)
  assert tuple(weights.shape) == (B, 4, TK, TK)
  if mask is not None:  # masked keys get exactly zero weight
    assert np.all(to_np(weights)[~np.broadcast_to(mask[:, None] if mask.ndim == 3 else mask,
                                                  weights.shape)] == 0)


def test_encoder_decoder_attention_matches_numpy_with_other_channels():
  """d_k != d_v (Table 3 row B style), memory of another length and a padding mask."""
  layer = MultiHeadAttention(num_heads=2, key_channels=8, value_channels=12, output_channels=10,
                             self_attention=False)
  query, memory = random_array(B, TQ, D, seed=1), random_array(B, TK, D, seed=2)
  mask = padding_mask_np()[:, None, :]
  output, weights = layer(query, memory, attention_mask=mask, return_attention_scores=True)
  expected, expected_weights = np_attention(query, memory, *attention_weights_np(layer), 2, mask)
  assert tuple(output.shape) == (B, TQ, 10)
  np.testing.assert_allclose(to_np(output), expected, atol=1e-5)
  np.testing.assert_allclose(to_np(weights), expected_weights, atol=1e-6)
  # The precomputed memory keys/values give the same answer.
  cached, _ = layer(query, cache=layer.compute_memory_kv(memory), attention_mask=mask)
  np.testing.assert_allclose(to_np(cached), expected, atol=1e-5)
  # Keys stored transposed ("kt", the layout of a cache grouped queries share): the same keys,
  # [B, H, d_k, S], and the same answer.
  plain, transposed = layer.compute_memory_kv(memory), layer.compute_memory_kv(memory, True)
  assert set(transposed) == {"kt", "v"}
  np.testing.assert_array_equal(to_np(transposed["kt"]), np.swapaxes(to_np(plain["k"]), 2, 3))
  cached, _ = layer(query, cache=transposed, attention_mask=mask)
  np.testing.assert_allclose(to_np(cached), expected, atol=1e-5)


def test_attention_has_no_biases_and_fused_kernels():
  layer = MultiHeadAttention(num_heads=4, key_channels=8)
  layer(random_array(1, 3, D))
  assert [tuple(w.shape) for w in layer.weights] == [(D, 8 + 8 + D), (D, D)]
  cross = MultiHeadAttention(num_heads=4, self_attention=False)
  cross(random_array(1, 3, D), random_array(1, 4, 6))
  assert [tuple(w.shape) for w in cross.weights] == [(D, D), (6, 2 * D), (D, D)]


@pytest.mark.parametrize("self_attention", [True, False])
def test_attention_biases_match_numpy(self_attention):
  """use_bias (Marian): x W + b for Q, K, V and the output, fused like the kernels."""
  layer = MultiHeadAttention(num_heads=4, self_attention=self_attention, use_bias=True)
  query, memory = random_array(B, TQ, D), random_array(B, TK, D, seed=1)
  run_layer_test(MultiHeadAttention, dict(num_heads=4, self_attention=self_attention, use_bias=True),
                 inputs=(query,) if self_attention else (query, memory),
                 expected_output_shape=(B, TQ, D),
                 expected_num_trainable_weights=4 if self_attention else 6)
  layer(query, None if self_attention else memory)
  for seed, weight in enumerate(layer.weights):  # non-zero biases, so they are tested too
    weight.assign(random_array(*weight.shape, seed=10 + seed) * 0.3)
  wq, wk, wv, wo = attention_weights_np(layer)
  biases = ([to_np(layer.qkv_bias)] if self_attention else
            [to_np(layer.q_bias), to_np(layer.kv_bias)])
  bq, bk, bv = np.split(np.concatenate(biases), [D, 2 * D])
  # x W + b == [x, 1] [W; b]: the numpy reference on inputs with a ones column.
  with_one = lambda x: np.concatenate([x, np.ones(x.shape[:-1] + (1,), "float32")], -1)
  with_bias = lambda w, b: np.concatenate([w, b[None]])
  keys = query if self_attention else memory
  expected, _ = np_attention(with_one(query), with_one(keys), with_bias(wq, bq), with_bias(wk, bk),
                             with_bias(wv, bv), wo, 4)
  got = layer(query, None if self_attention else memory)
  np.testing.assert_allclose(to_np(got), expected + to_np(layer.output_bias), atol=1e-4)


def test_self_attention_cache_matches_full_causal_attention():
  layer = MultiHeadAttention(num_heads=4)
  x = random_array(B, TK, D)
  full = to_np(layer(x, attention_mask=np.tril(np.ones((TK, TK), bool))))
  cache = layer.init_cache(B, max_length=TK + 3)  # longer than needed: the tail stays masked
  assert tuple(cache["k"].shape) == (B, 4, TK + 3, D // 4)
  steps = []
  for step in range(TK):
    output, cache = layer(x[:, step:step + 1], cache=cache, step=step)
    steps.append(to_np(output))
  np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)
  # Two positions at once (a prefix), then one more.
  cache = layer.init_cache(B, max_length=TK)
  first, cache = layer(x[:, :2], cache=cache, step=0)
  np.testing.assert_allclose(to_np(first), full[:, :2], atol=1e-5)
  third, _ = layer(x[:, 2:3], cache=cache, step=2)  # sees the keys the prefix wrote
  np.testing.assert_allclose(to_np(third), full[:, 2:3], atol=1e-5)


def test_attention_softmax_is_float32_under_mixed_precision():
  layer = MultiHeadAttention(num_heads=2, dtype="mixed_float16")
  output, weights = layer(random_array(B, TK, D), attention_mask=padding_mask_np()[:, None, :],
                          return_attention_scores=True)
  assert keras.backend.standardize_dtype(output.dtype) == "float16"
  assert keras.backend.standardize_dtype(weights.dtype) == "float32"
  np.testing.assert_allclose(to_np(weights).sum(-1), 1.0, atol=1e-5)
  assert np.all(to_np(weights)[0, :, :, 4:] == 0)


def test_attention_dropout_only_in_training():
  layer = MultiHeadAttention(num_heads=2, attention_dropout=0.5)
  x = random_array(B, TK, D)
  np.testing.assert_allclose(to_np(layer(x)), to_np(layer(x, training=False)))
  assert not np.allclose(to_np(layer(x, training=True)), to_np(layer(x)))


def test_attention_dropout_drops_attention_weights():
  """T2T's attention_dropout drops softmax(Q K^T / sqrt(d_k)), before the product with V. With
  zero queries and keys (weights 1/T everywhere), V = x = one-hot(j) + 1 and W^O = I, output
  row i is c (m_i + s_i) on the first T channels and c s_i on the others, for the kept weights
  m_ij in {0, 1}, s_i their sum and c = 1 / (T (1 - rate)). A dropout of V or of the output
  instead (or none) passes test_attention_dropout_only_in_training."""
  rate, batch = 0.3, 8
  layer = MultiHeadAttention(num_heads=1, attention_dropout=rate)
  x = np.eye(TK, D, dtype="float32")[None].repeat(batch, 0) + 1  # [8, TK, D]
  layer(x)
  layer.qkv_kernel.assign(np.concatenate([np.zeros((D, 2 * D)), np.eye(D)], 1).astype("float32"))
  layer.output_kernel.assign(np.eye(D, dtype="float32"))
  c = 1 / (TK * (1 - rate))
  got = to_np(layer(x, training=True)) / c                       # m_i + s_i, then s_i
  sums = got[..., TK:]
  np.testing.assert_allclose(sums, sums[..., :1].repeat(D - TK, -1), atol=1e-4)
  kept = got[..., :TK] - sums[..., :1]
  np.testing.assert_allclose(kept, np.round(kept), atol=1e-4)
  assert set(np.round(kept).ravel()) == {0.0, 1.0}
  np.testing.assert_allclose(kept.sum(-1), sums[..., 0], atol=1e-3)
  assert 0.15 < 1 - np.round(kept).mean() < 0.45


def test_attention_validates_its_inputs():
  layer = MultiHeadAttention(num_heads=2)
  x = random_array(B, TK, D)
  with pytest.raises(ValueError, match="boolean"):
    layer(x, attention_mask=np.ones((TK, TK), "float32"))
  with pytest.raises(ValueError, match="shape"):
    layer(x[0])
  with pytest.raises(ValueError, match="self_attention=False"):
    layer(x, random_array(B, 3, D))
  with pytest.raises(ValueError, match="both"):
    layer(x, cache=layer.init_cache(B, TK))
  with pytest.raises(ValueError, match="query_groups"):  # a grouped cache, no groups
    layer(x[:, :1], cache=layer.init_cache(B, TK, groups=2), step=0)
  with pytest.raises(ValueError, match="divisible"):
    MultiHeadAttention(num_heads=3)(x)  # d = 16 is the default key_channels
  with pytest.raises(ValueError, match="divisible"):
    MultiHeadAttention(num_heads=2, value_channels=9)
  with pytest.raises(ValueError, match="memory"):
    MultiHeadAttention(num_heads=2, self_attention=False)(x)
  with pytest.raises(ValueError, match="dropout rate"):
    MultiHeadAttention(num_heads=2, attention_dropout=1.5)


# ---- FeedForward -----------------------------------------------------------------------------

def test_feed_forward_layer_contract():
  run_layer_test(FeedForward, dict(filter_size=24, output_channels=8, relu_dropout=0.1),
                 inputs=(random_array(B, TQ, D),), expected_output_shape=(B, TQ, 8),
                 expected_num_trainable_weights=4)


def test_feed_forward_matches_numpy():
  layer = FeedForward(filter_size=32)
  x = random_array(B, TQ, D)
  layer(x)
  layer.bias_1.assign(random_array(32, seed=3))  # non-zero biases, so they are tested too
  layer.bias_2.assign(random_array(D, seed=4))
  np.testing.assert_allclose(to_np(layer(x)), np_ffn(x, layer), atol=1e-5)
  assert [tuple(w.shape) for w in layer.weights] == [(D, 32), (32,), (32, D), (D,)]


def test_relu_dropout_drops_the_hidden_activations():
  """T2T's dense_relu_dense: dropout at relu_dropout between the two layers, on max(0, x W1 + b1).
  With W2 = I and b2 = 0.5, each element of output - b2 is 0 or max(0, x W1 + b1) / (1 - rate);
  a dropout of the output instead (or none) passes every other FeedForward test, all at
  inference."""
  rate = 0.3
  layer = FeedForward(filter_size=D, relu_dropout=rate)
  x = random_array(8, TK, D)  # 8 * 7 * 16 activations, about half of them positive
  layer(x)
  layer.bias_1.assign(random_array(D, seed=3))
  layer.kernel_2.assign(np.eye(D, dtype="float32"))
  layer.bias_2.assign(np.full(D, 0.5, "float32"))
  hidden = np.maximum(0, x @ to_np(layer.kernel_1) + to_np(layer.bias_1))
  got = to_np(layer(x, training=True)) - 0.5
  kept = np.isclose(got, hidden / (1 - rate), atol=1e-5)
  dropped = np.abs(got) < 1e-5
  assert np.all(kept | dropped)
  positive = hidden > 1e-3  # where kept and dropped differ
  assert 0.15 < (dropped & positive).sum() / positive.sum() < 0.45


def test_swish_feed_forward_matches_numpy_at_any_batch():
  """activation="swish" (Marian): x * sigmoid(x), on many rows and on the one-row decoding path."""
  run_layer_test(FeedForward, dict(filter_size=24, activation="swish"),
                 inputs=(random_array(B, TQ, D),), expected_output_shape=(B, TQ, D),
                 expected_num_trainable_weights=4)
  layer = FeedForward(filter_size=32, activation="swish")
  x = random_array(3, D, seed=1)
  layer(x)
  layer.bias_1.assign(random_array(32, seed=3))
  layer.bias_2.assign(random_array(D, seed=4))
  expected = np_ffn(x, layer)
  layer.activation = "relu"
  assert not np.allclose(expected, np_ffn(x, layer), atol=1e-2)  # swish is not relu here
  layer.activation = "swish"
  np.testing.assert_allclose(to_np(layer(x, training=False)), expected, atol=1e-5)
  np.testing.assert_allclose(to_np(layer(x[:1], training=False)), expected[:1], atol=1e-5)
  with pytest.raises(ValueError, match="activation"):
    FeedForward(8, activation="gelu")


def test_feed_forward_at_one_row_matches_numpy():
  """One row at inference (a batch-1 decoding step) moves the biases past the products
  (max(h, -b1) + b1, h - (-b2)); it is the same function, with pre-activations of both signs."""
  layer = FeedForward(filter_size=32)
  x = random_array(3, D, seed=1)
  layer(x)
  layer.bias_1.assign(random_array(32, seed=3))
  layer.bias_2.assign(random_array(D, seed=4))
  expected = np_ffn(x, layer)
  pre_activation = x[:1] @ to_np(layer.kernel_1) + to_np(layer.bias_1)
  assert (pre_activation > 0).any() and (pre_activation < 0).any()
  np.testing.assert_allclose(to_np(layer(x[:1], training=False)), expected[:1], atol=1e-5)
  np.testing.assert_allclose(to_np(layer(x[None, :1], training=False))[0], expected[:1], atol=1e-5)
  np.testing.assert_allclose(to_np(layer(x, training=False)), expected, atol=1e-5)


# ---- Position encodings ----------------------------------------------------------------------

def test_position_encoding_layer_contracts():
  x = random_array(B, TQ, D)
  run_layer_test(SinusoidalPositionEncoding, dict(layout="interleave", max_timescale=100.0),
                 inputs=(x,), expected_output_shape=(B, TQ, D), expected_num_trainable_weights=0)
  run_layer_test(LearnedPositionEmbedding, dict(max_position=9), inputs=(x,),
                 expected_output_shape=(B, TQ, D), expected_num_trainable_weights=1)


@pytest.mark.parametrize("layout", ["concat", "interleave"])
@pytest.mark.parametrize("channels", [16, 17])
def test_sinusoid_matches_formula(layout, channels):
  layer = SinusoidalPositionEncoding(layout=layout)
  # Not zeros: the layer returns the signal alone (its caller adds it), and a sum with the input
  # would pass on zeros.
  x = random_array(B, 50, channels)
  expected = np_timing_signal(range(50), channels, layout=layout)
  np.testing.assert_allclose(to_np(layer(x))[1], expected, atol=1e-5)
  # Decoding: one position at a (possibly traced) start index, or explicit positions.
  np.testing.assert_allclose(to_np(layer(x[:, :1], start_index=ops.convert_to_tensor(37)))[0, 0],
                             expected[37], atol=1e-5)
  explicit = to_np(layer(x[:, :3], positions=np.array([[4, 9, 2], [0, 1, 2]])))
  np.testing.assert_allclose(explicit[0], expected[[4, 9, 2]], atol=1e-5)
  np.testing.assert_allclose(explicit[1], expected[[0, 1, 2]], atol=1e-5)  # each row its own


def test_sinusoid_timescales_are_t2ts():
  """min_timescale and max_timescale as T2T's get_timing_signal_1d reads them (np_timing_signal):
  every other test keeps min_timescale at 1, where ignoring it, or dividing the frequencies by
  it as the layer's docstring said, passes as well."""
  layer = SinusoidalPositionEncoding(min_timescale=2.0, max_timescale=100.0)
  x = random_array(1, 30, 16)
  np.testing.assert_allclose(to_np(layer(x))[0], np_timing_signal(range(30), 16, 2.0, 100.0),
                             atol=1e-5)


def test_sinusoid_layouts_are_a_channel_permutation():
  x = np.zeros((1, 20, 8), "float32")
  concat = to_np(SinusoidalPositionEncoding()(x))[0]
  interleave = to_np(SinusoidalPositionEncoding(layout="interleave")(x))[0]
  np.testing.assert_allclose(interleave, concat[:, [0, 4, 1, 5, 2, 6, 3, 7]], atol=1e-6)


@pytest.mark.parametrize("interleave", [True, False])
def test_sinusoid_paper_frequencies_match_the_papers_formula(interleave):
  """frequencies="paper": 10000^(2i/d), interleaved (the paper) or in halves (Hugging Face's
  Marian models), against the formula written element by element."""
  layer = SinusoidalPositionEncoding(frequencies="paper",
                                     layout="interleave" if interleave else "concat")
  x = np.zeros((1, 60, 32), "float32")
  expected = np_paper_signal(range(60), 32, interleave)
  np.testing.assert_allclose(to_np(layer(x))[0], expected, atol=2e-5)
  np.testing.assert_allclose(to_np(layer(x[:, :1], start_index=41))[0, 0], expected[41], atol=2e-5)
  with pytest.raises(ValueError, match="frequencies"):
    SinusoidalPositionEncoding(frequencies="marian")


def test_t2t_and_paper_sinusoids_differ_more_with_position():
  """T2T's spacing (Marian's too) is not the paper's: at d = 512 the two signals differ by 0.013
  within the first 10 positions, 0.142 within 100 and 0.284 within 200 (docs/model.md),
  in either layout (the interleaved T2T signal is not the paper's formula)."""
  x = np.zeros((1, 200, 512), "float32")
  for layout in ("concat", "interleave"):
    t2t = to_np(SinusoidalPositionEncoding(layout=layout)(x))[0]
    paper = to_np(SinusoidalPositionEncoding(frequencies="paper", layout=layout)(x))[0]
    differences = [np.abs(t2t[:n] - paper[:n]).max() for n in (10, 100, 200)]
    np.testing.assert_allclose(differences, [0.0129, 0.1423, 0.2841], atol=2e-3)
  np.testing.assert_allclose(paper, np_paper_signal(range(200), 512, interleave=True), atol=1e-4)


def test_learned_position_embedding_rows():
  layer = LearnedPositionEmbedding(max_position=12)
  x = random_array(B, 5, D)  # not zeros, on which the table rows plus the input would pass too
  output = to_np(layer(x))
  table = to_np(layer.embeddings)
  assert table.shape == (12, D)
  np.testing.assert_allclose(output[1], table[:5])
  np.testing.assert_allclose(to_np(layer(x[:, :1], start_index=7))[0, 0], table[7])
  with pytest.raises(ValueError, match="max_position"):
    layer(np.zeros((1, 13, D), "float32"))


# ---- SharedEmbedding -------------------------------------------------------------------------

def test_shared_embedding_layer_contract():
  settings = dict(vocab_size=11, hidden_size=D, zero_pad=False)
  run_layer_test(SharedEmbedding, settings, inputs=(np.array([[3, 4, 0]]),),
                 expected_output_shape=(1, 3, D), expected_num_trainable_weights=1)
  # The pre-softmax projection: logits stay float32 under mixed precision.
  run_layer_test(SharedEmbedding, settings, inputs=(random_array(B, TQ, D),),
                 call_kwargs=dict(reverse=True), expected_output_shape=(B, TQ, 11),
                 expected_num_trainable_weights=1, mixed_precision_output_dtype="float32")


def test_shared_embedding_embeds_scales_and_projects_with_one_matrix():
  layer = SharedEmbedding(vocab_size=1000, hidden_size=64)
  ids = np.array([[5, 999, 1, 0]])
  embedded = to_np(layer(ids))
  table = to_np(layer.embeddings)
  assert len(layer.weights) == 1 and table.shape == (1000, 64)
  np.testing.assert_allclose(embedded[0, :3], table[[5, 999, 1]] * 8.0, rtol=1e-6)
  assert np.all(embedded[0, 3] == 0)  # PAD (id 0) embeds to zeros, as in T2T
  assert abs(table.std() - 64 ** -0.5) < 0.01  # T2T's normal(0, d^-0.5)
  x = random_array(2, 3, 64)
  logits = layer(x, reverse=True)
  assert keras.backend.standardize_dtype(logits.dtype) == "float32"
  np.testing.assert_allclose(to_np(logits), x @ table.T, atol=1e-4)
  np.testing.assert_array_equal(to_np(layer.compute_table()), table)
  with_table = layer(x, reverse=True, table=layer.compute_table())  # x E^T, no transposed copy
  np.testing.assert_allclose(to_np(with_table), x @ table.T, atol=1e-4)
  no_zero = SharedEmbedding(vocab_size=10, hidden_size=4, zero_pad=False)
  assert np.any(to_np(no_zero(np.array([0]))) != 0)


def test_shared_embedding_without_scale_and_with_a_logits_bias():
  """scale=False: E[ids] as they are; logits_bias=True: x E^T + b (Marian's output layer)."""
  run_layer_test(SharedEmbedding, dict(vocab_size=11, hidden_size=D, logits_bias=True),
                 inputs=(random_array(B, TQ, D),), call_kwargs=dict(reverse=True),
                 expected_output_shape=(B, TQ, 11), expected_num_trainable_weights=2,
                 mixed_precision_output_dtype="float32")
  layer = SharedEmbedding(vocab_size=11, hidden_size=D, scale=False, logits_bias=True)
  ids = np.array([[5, 3, 0]])
  embedded = to_np(layer(ids))
  table = to_np(layer.embeddings)
  np.testing.assert_allclose(embedded[0, :2], table[[5, 3]], rtol=1e-6)
  bias = random_array(11, seed=2)
  layer.logits_bias.assign(bias)
  x = random_array(2, 1, D)
  np.testing.assert_allclose(to_np(layer(x, reverse=True)), x @ table.T + bias, atol=1e-5)
  with_table = layer(x, reverse=True, table=layer.compute_table())
  np.testing.assert_allclose(to_np(with_table), x @ table.T + bias, atol=1e-5)
  with pytest.raises(ValueError, match="integer"):
    layer(np.array([1.0, 2.0]))


# ---- Encoder / decoder layers and stacks -----------------------------------------------------

def test_encoder_and_decoder_layer_contracts():
  x, memory, mask = random_array(B, TQ, D), random_array(B, TK, D), padding_mask_np()
  # Per layer: attention 2 (+ 1 for encoder-decoder attention), feed-forward 4, norms 2 each.
  run_layer_test(EncoderLayer, dict(config=CONFIG.replace(norm_type="post")), inputs=(memory,),
                 call_kwargs=dict(padding_mask=mask), expected_output_shape=(B, TK, D),
                 expected_num_trainable_weights=10)
  run_layer_test(DecoderLayer, dict(config=CONFIG.replace(layer_norm_epsilon=1e-5)),
                 inputs=(x, memory), call_kwargs=dict(memory_padding_mask=mask),
                 expected_output_shape=(B, TQ, D), expected_num_trainable_weights=15)


def test_encoder_and_decoder_stack_contracts():
  x, memory, mask = random_array(B, TQ, D), random_array(B, TK, D), padding_mask_np()
  # Pre-norm stacks end with a LayerNorm (2 weights); post-norm ones do not.
  run_layer_test(Encoder, dict(config=CONFIG.replace(num_encoder_layers=2,
                                                     attention_value_channels=8)),
                 inputs=(memory,), call_kwargs=dict(padding_mask=mask),
                 expected_output_shape=(B, TK, D), expected_num_trainable_weights=2 * 10 + 2)
  run_layer_test(Decoder, dict(config=CONFIG.replace(num_decoder_layers=2, norm_type="post")),
                 inputs=(x, memory), call_kwargs=dict(memory_padding_mask=mask),
                 expected_output_shape=(B, TQ, D), expected_num_trainable_weights=2 * 15)


# layer_norm_epsilon far from T2T's 1e-6 and Keras' 1e-3, so that a norm built without it shows.
CONFIG = ModelConfig(hidden_size=D, num_heads=4, filter_size=32, layer_prepostprocess_dropout=0.0,
                     attention_dropout=0.0, relu_dropout=0.0, layer_norm_epsilon=1e-2)


def randomize_norms(layer):
  """Gives each LayerNorm inside `layer` a gamma and beta of its own: as built they are all 1 and
  0, one and the same function, so a norm applied in another's place would go unnoticed."""
  weights = [w for w in layer.weights if w.path.endswith(("/gamma", "/beta"))]
  assert weights
  for seed, weight in enumerate(weights):
    noise = random_array(*weight.shape, seed=100 + seed) * 0.5
    weight.assign(noise + 1 if weight.path.endswith("/gamma") else noise)


def np_encoder_layer(x, layer, padding_mask, norm_type):
  def attend(y):
    return np_attention(y, y, *attention_weights_np(layer.self_attention), 4,
                        padding_mask[:, None, :])[0]

  x = np_sublayer(x, attend, layer.self_attention_norm, norm_type)
  return np_sublayer(x, lambda y: np_ffn(y, layer.feed_forward), layer.feed_forward_norm,
                     norm_type)


@pytest.mark.parametrize("norm_type", ["pre", "post"])
def test_encoder_layer_matches_numpy(norm_type):
  layer = EncoderLayer(CONFIG.replace(norm_type=norm_type))
  x, mask = random_array(B, TK, D), padding_mask_np()
  layer(x, padding_mask=mask)
  randomize_norms(layer)
  output = to_np(layer(x, padding_mask=mask))
  np.testing.assert_allclose(output, np_encoder_layer(x, layer, mask, norm_type), atol=1e-4)


@pytest.mark.parametrize("norm_type", ["pre", "post"])
def test_decoder_layer_matches_numpy(norm_type):
  layer = DecoderLayer(CONFIG.replace(norm_type=norm_type))
  x, memory, mask = random_array(B, TQ, D, seed=1), random_array(B, TK, D, seed=2), padding_mask_np()
  layer(x, memory, memory_padding_mask=mask)
  randomize_norms(layer)
  output = to_np(layer(x, memory, memory_padding_mask=mask))

  def self_attend(y):
    return np_attention(y, y, *attention_weights_np(layer.self_attention), 4,
                        np.tril(np.ones((TQ, TQ), bool)))[0]

  def encdec_attend(y):
    return np_attention(y, memory, *attention_weights_np(layer.encdec_attention), 4,
                        mask[:, None, :])[0]

  expected = np_sublayer(x, self_attend, layer.self_attention_norm, norm_type)
  expected = np_sublayer(expected, encdec_attend, layer.encdec_attention_norm, norm_type)
  expected = np_sublayer(expected, lambda y: np_ffn(y, layer.feed_forward),
                         layer.feed_forward_norm, norm_type)
  np.testing.assert_allclose(output, expected, atol=1e-4)


@pytest.mark.parametrize("norm_type", ["pre", "post"])
def test_encoder_stack_chains_layers_and_final_norm(norm_type):
  encoder = Encoder(CONFIG.replace(num_encoder_layers=2, norm_type=norm_type))
  x, mask = random_array(B, TK, D), padding_mask_np()
  encoder(x, padding_mask=mask)
  randomize_norms(encoder)
  output, scores = encoder(x, padding_mask=mask, return_attention_scores=True)
  expected = x
  for layer in encoder.layers:
    expected = np_encoder_layer(expected, layer, mask, norm_type)
  if norm_type == "pre":  # T2T's later sets end the stack with a LayerNorm
    expected = np_layer_norm(expected, encoder.final_norm)
  assert hasattr(encoder, "final_norm") == (norm_type == "pre")
  np.testing.assert_allclose(to_np(output), expected, atol=1e-4)
  assert len(scores) == 2 and tuple(scores[0].shape) == (B, 4, TK, TK)


@pytest.mark.parametrize("norm_type", ["pre", "post"])
def test_residual_dropout_drops_the_sublayer_output_before_the_add(norm_type):
  """Paper section 5.4: dropout "to the output of each sub-layer, before it is added to the
  sub-layer input", at layer_prepostprocess_dropout. The layer tests above run at inference,
  where a dropout of the sum instead passes too. With an identity norm and a sub-layer of
  constant output c, each element of output - x is 0 or c / (1 - P_drop)."""
  rate = 0.3
  layer = EncoderLayer(CONFIG.replace(norm_type=norm_type, layer_prepostprocess_dropout=rate))
  x = random_array(B, TK, D)
  layer(x)
  c = np.full((B, TK, D), 0.5, "float32")
  added = to_np(layer.residual(x, lambda y: ops.zeros_like(y) + c, lambda y: y, training=True)) - x
  kept = np.isclose(added, c / (1 - rate), atol=1e-5)
  assert np.all(kept | (np.abs(added) < 1e-5))
  assert 0.15 < 1 - kept.mean() < 0.45  # about P_drop of the elements dropped
  np.testing.assert_allclose(to_np(layer.residual(x, lambda y: ops.zeros_like(y) + c, lambda y: y,
                                                  training=False)), x + c, atol=1e-6)


def test_encoder_ignores_padded_positions():
  encoder = Encoder(CONFIG.replace(num_encoder_layers=2))
  x, mask = random_array(B, TK, D), padding_mask_np()
  changed = x.copy()
  changed[~mask] = random_array(int((~mask).sum()), D, seed=9)
  np.testing.assert_allclose(to_np(encoder(changed, padding_mask=mask))[mask],
                             to_np(encoder(x, padding_mask=mask))[mask], atol=1e-5)


@pytest.mark.parametrize("norm_type", ["pre", "post"])
def test_decoder_stack_cache_matches_full(norm_type):
  decoder = Decoder(CONFIG.replace(num_decoder_layers=2, norm_type=norm_type,
                                   attention_key_channels=8))
  x, memory, mask = random_array(B, TQ, D, seed=1), random_array(B, TK, D, seed=2), padding_mask_np()
  full = to_np(decoder(x, memory, memory_padding_mask=mask))
  cache = join_layer_caches(decoder.init_self_cache(B, max_length=TQ), decoder.memory_cache(memory))
  assert tuple(cache["layer_1"]["self"]["k"].shape) == (B, 4, TQ, 2)
  assert tuple(cache["layer_1"]["memory"]["v"].shape) == (B, 4, TK, 4)
  steps = []
  for step in range(TQ):
    output, cache = decoder(x[:, step:step + 1], memory_padding_mask=mask, cache=cache, step=step)
    steps.append(to_np(output))
  np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)
  # split_layer_caches inverts join_layer_caches: the written self-attention part and the
  # untouched memory part, each keyed by layer.
  self_part, memory_part = split_layer_caches(cache)
  assert sorted(self_part) == sorted(memory_part) == ["layer_0", "layer_1"]
  for name, memory_kv in decoder.memory_cache(memory).items():
    for key in ("k", "v"):
      np.testing.assert_array_equal(to_np(memory_part[name][key]), to_np(memory_kv[key]))
      assert self_part[name][key] is cache[name]["self"][key]
  assert join_layer_caches(self_part, memory_part).keys() == cache.keys()


def test_encoder_decoder_layers_validate_arguments():
  with pytest.raises(ValueError, match="norm_type"):
    EncoderLayer(ModelConfig(num_heads=2, filter_size=8, norm_type="middle"))
  with pytest.raises(ValueError, match="num_encoder_layers"):
    Encoder(ModelConfig(num_encoder_layers=0, num_heads=2, filter_size=8))
  with pytest.raises(TypeError, match="ModelConfig"):
    Encoder(2)
  small = ModelConfig(hidden_size=8, num_heads=2, filter_size=8)
  with pytest.raises(ValueError, match="memory"):
    DecoderLayer(small)(random_array(1, 3, 8))
  with pytest.raises(ValueError, match="boolean"):
    EncoderLayer(small)(random_array(1, 3, 8), padding_mask=np.ones((1, 3)))
