"""The projections' matmul, the initializer of fused projection kernels and the split of their
outputs."""

import keras
from keras import ops

from t2t_lite.layers.tracing_switch import TracingSwitch

# On by default; `python scripts/bench_train.py --projection` times a training step both ways
# (where `transpose_b` matmuls are as fast, off saves the copy).
transposed_gradients = TracingSwitch("project's transposed kernel copy for input gradients")


def project(x, kernel):
  """`x [N, d_in] @ kernel [d_in, d_out]`, the 2-D matmul of every projection.

  On TensorFlow, when 256 <= d_in <= d_out, the input gradient `dy @ kernel^T` multiplies by an
  explicitly transposed copy of the kernel instead of a matmul with `transpose_b`: oneDNN runs
  these `transpose_b` products (the QKV, output, encoder-decoder and first feed-forward
  projections of a d 512 model) slower than the same product with the transpose made first
  (`python scripts/bench_train.py --projection`; docs/performance.md). TF's graph optimizer folds a
  plain transpose back into the matmul, so the copy goes through `Snapshot`. Values and
  gradients are those of `ops.matmul`; other backends and shapes use it directly, and so does
  everything traced inside `with transposed_gradients(False):`.
  """
  d_in, d_out = kernel.shape[0], kernel.shape[1]
  if (keras.backend.backend() != "tensorflow" or not transposed_gradients.enabled
      or not 256 <= d_in <= d_out):
    return ops.matmul(x, kernel)
  import tensorflow as tf  # pylint: disable=import-outside-toplevel

  @tf.custom_gradient
  def matmul(x, kernel):
    def grad(dy):
      transposed = tf.raw_ops.Snapshot(input=tf.transpose(kernel))
      return tf.matmul(dy, transposed), tf.matmul(x, dy, transpose_a=True)
    return tf.matmul(x, kernel), grad

  return matmul(x, kernel)


def fused_glorot_uniform(sizes):
  """Glorot-uniform for a kernel [d, sum(sizes)] that fuses several projections.

  Each part [d, size] gets the scale it would have as a separate kernel, as T2T's separate q/k/v
  projections do (T2T's `uniform_unit_scaling` with gain 1 is Glorot uniform).
  """
  def initializer(shape, dtype=None):
    parts = [keras.initializers.GlorotUniform()((shape[0], size), dtype=dtype) for size in sizes]
    return ops.concatenate(parts, axis=-1)

  return initializer


def split(x, sizes):
  """The last axis of `x` (a fused projection's output) cut into pieces of `sizes` (Python ints
  that sum to its size), as `ops.split(x, [the cumulative sizes], axis=-1)` cuts it: the same
  values. On TensorFlow one `SplitV`, where Keras' split derives the pieces' sizes from the
  tensor's shape inside the graph (about 24 graph operations a call, at every layer of every
  traced decoding step)."""
  if keras.backend.backend() != "tensorflow":
    return ops.split(x, [sum(sizes[:i + 1]) for i in range(len(sizes) - 1)], axis=-1)
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  return tf.split(x, list(sizes), axis=-1)
