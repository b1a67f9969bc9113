"""`projection.project` (TensorFlow): the values and both gradients of a plain matmul, on every path;
`projection.fused_glorot_uniform`: each part of a fused attention kernel a Glorot uniform of its own;
`projection.split`: numpy's split of a fused projection's output, traced as one operation."""

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.layers import FeedForward, projection


@pytest.mark.parametrize("mode", ["eager", "graph", "xla"])
@pytest.mark.parametrize("d_in, d_out", [(256, 512), (256, 256), (128, 512), (512, 256)])
def test_project_values_and_gradients_match_numpy(mode, d_in, d_out):
  """(256, 512) and (256, 256) take the transposed-copy gradient; the others plain ops.matmul."""
  rng = np.random.default_rng(d_in + d_out)
  x = rng.normal(size=(70, d_in)).astype("float32")
  kernel = rng.normal(size=(d_in, d_out)).astype("float32")
  dy = rng.normal(size=(70, d_out)).astype("float32")

  def value_and_grads(x, kernel):
    with tf.GradientTape() as tape:
      tape.watch([x, kernel])
      y = projection.project(x, kernel)
      loss = tf.reduce_sum(y * dy)
    return [y] + tape.gradient(loss, [x, kernel])

  if mode != "eager":
    value_and_grads = tf.function(value_and_grads, jit_compile=mode == "xla")
  y, dx, dkernel = (t.numpy() for t in value_and_grads(tf.constant(x), tf.constant(kernel)))
  x64, k64, dy64 = x.astype("float64"), kernel.astype("float64"), dy.astype("float64")
  np.testing.assert_allclose(y, x64 @ k64, rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(dx, dy64 @ k64.T, rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(dkernel, x64.T @ dy64, rtol=1e-4, atol=1e-3)


def test_project_gradients_keep_float16():
  x = tf.constant(np.random.default_rng(0).normal(size=(8, 256)), tf.float16)
  kernel = tf.constant(np.random.default_rng(1).normal(size=(256, 384)) * 0.05, tf.float16)
  with tf.GradientTape() as tape:
    tape.watch([x, kernel])
    loss = tf.reduce_sum(projection.project(x, kernel))
  dx, dkernel = tape.gradient(loss, [x, kernel])
  assert dx.dtype == tf.float16 and dkernel.dtype == tf.float16
  np.testing.assert_allclose(dx.numpy(), np.tile(kernel.numpy().astype("float32").sum(1), (8, 1)),
                             rtol=1e-2, atol=1e-2)


def test_feed_forward_gradients_equal_plain_matmul_ones():
  layer = FeedForward(filter_size=512)
  x = tf.constant(np.random.default_rng(2).normal(size=(3, 5, 256)), tf.float32)

  def grads():
    with tf.GradientTape() as tape:
      tape.watch(x)
      loss = tf.reduce_sum(tf.sin(layer(x)))
    return tape.gradient(loss, [x] + layer.trainable_weights)

  fast = grads()
  with projection.transposed_gradients(False):
    plain_grads = grads()
  for ours, plain in zip(fast, plain_grads):
    np.testing.assert_allclose(ours.numpy(), plain.numpy(), rtol=1e-5, atol=1e-6)


def test_transposed_gradients_switch_is_read_at_tracing_and_restored():
  x, kernel = tf.zeros((4, 256)), tf.zeros((256, 512))

  def gradient_graph_ops():
    @tf.function
    def dx(x):
      with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(projection.project(x, kernel))
      return tape.gradient(loss, x)
    return {op.type for op in dx.get_concrete_function(x).graph.get_operations()}

  assert "Snapshot" in gradient_graph_ops()
  with projection.transposed_gradients(False):
    assert "Snapshot" not in gradient_graph_ops()
  assert "Snapshot" in gradient_graph_ops()


@pytest.mark.parametrize("self_attention", [True, False])
def test_fused_kernels_initialize_each_projection_as_its_own_glorot_uniform(self_attention):
  """Attention's fused kernels (q|k|v, or k|v for encoder-decoder attention) as T2T's separate
  projections: each part [d, size] uniform in +-sqrt(6 / (d + size)), drawn on its own, not
  one Glorot draw over the whole [d, sum(sizes)] (its limit is 0.93x the keys' part's here, or
  less). Part sizes differ (keys 256, values 64), so a limit taken from the wrong part shows too."""
  from t2t_lite.layers import MultiHeadAttention
  d, key_channels, value_channels = 128, 256, 64
  layer = MultiHeadAttention(num_heads=2, key_channels=key_channels, value_channels=value_channels,
                             self_attention=self_attention)
  x = tf.zeros((1, 3, d))
  layer(x) if self_attention else layer(x, memory=x)
  kernel = (layer.qkv_kernel if self_attention else layer.kv_kernel).numpy()
  sizes = [key_channels] * (2 if self_attention else 1) + [value_channels]
  assert kernel.shape == (d, sum(sizes))
  parts = np.split(kernel, np.cumsum(sizes)[:-1], axis=1)
  for part, size in zip(parts, sizes):
    limit = np.sqrt(6 / (d + size))
    # 8,192 draws or more: the largest lies within 0.1% of the limit; the std, limit / sqrt(3)
    # for a uniform, within 0.5% (one standard deviation).
    assert 0.99 * limit < np.abs(part).max() <= limit, (size, np.abs(part).max(), limit)
    assert abs(part.std() / (limit / np.sqrt(3)) - 1) < 0.03, size
  width = min(sizes[:2])  # drawn on their own: not one draw repeated
  assert abs(np.corrcoef(parts[0][:, :width].ravel(), parts[1][:, :width].ravel())[0, 1]) < 0.05


@pytest.mark.parametrize("mode", ["eager", "graph", "xla"])
def test_split_cuts_the_last_axis_as_numpy_does_and_traces_one_split(mode):
  """Values and gradients against numpy, batch and length unknown in the traced graph, and the
  trace holds one SplitV and no Shape (Keras' split derives the sizes from the shape in the
  graph: about 24 operations)."""
  x = np.random.default_rng(0).normal(size=(2, 3, 10)).astype("float32")
  weights = [np.random.default_rng(i).normal(size=(2, 3, n)).astype("float32")
             for i, n in enumerate((4, 4, 2))]

  def pieces_and_grad(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      pieces = projection.split(x, (4, 4, 2))
      loss = sum(tf.reduce_sum(p * w) for p, w in zip(pieces, weights))
    return pieces, tape.gradient(loss, x)

  if mode != "eager":
    pieces_and_grad = tf.function(pieces_and_grad, jit_compile=mode == "xla",
                                  input_signature=[tf.TensorSpec((None, None, 10), tf.float32)])
    split_only = tf.function(lambda x: projection.split(x, (4, 4, 2)),
                             input_signature=[tf.TensorSpec((None, None, 10), tf.float32)])
    kinds = [op.type for op in split_only.get_concrete_function().graph.get_operations()]
    assert kinds.count("SplitV") == 1 and "Shape" not in kinds and len(kinds) <= 8, kinds
  pieces, grad = pieces_and_grad(tf.constant(x))
  for piece, expected in zip(pieces, np.split(x, [4, 8], axis=-1)):
    np.testing.assert_array_equal(piece.numpy(), expected)
  np.testing.assert_array_equal(grad.numpy(), np.concatenate(weights, axis=-1))
