"""Gathers whose indices are known to be in range, in one graph operation on TensorFlow.

Keras' `take` and `take_along_axis` accept negative indices and fix them inside the graph, and
`take_along_axis` broadcasts its indices to the input's shape and moves the gathered axis last and
back: about 11 and 47 graph operations a call. A search's trace is mostly such small operations,
each costing time to create, and the searches' indices (beams, slots, sentences, positions already
clipped, chosen tokens) are never negative. On other backends these are `keras.ops` as they are.
"""

import keras
from keras import ops


def gather(x, indices, axis=0):
  """`ops.take(x, indices, axis)` for `indices` known to lie in [0, x.shape[axis]): the same
  values. On TensorFlow one `GatherV2`, where Keras' `take` adds a fix for negative indices (a
  `Shape`, `StridedSlice`, `Less`, `AddV2` and `SelectV2` with their constants) that a search's
  trace would create at every use; a trace's cost is mostly such small operations."""
  if keras.backend.backend() != "tensorflow":
    return ops.take(x, indices, axis=axis)
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  return tf.gather(x, indices, axis=axis)


def take_rows(x, indices):
  """`x` [b, n, ...] and `indices` int [b, k] in [0, n) -> [b, k, ...]: row `indices[i, j]` of
  sentence i, as `ops.take_along_axis(x, indices[:, :, None, ...], axis=1)` gives it. On
  TensorFlow one `GatherV2` over the rows (`batch_dims=1`), where Keras' `take_along_axis`
  broadcasts the indices to x's shape, fixes negative ones and transposes the gathered axis last
  and back (about 47 graph operations a call)."""
  if keras.backend.backend() != "tensorflow":
    return ops.take_along_axis(x, indices[(...,) + (None,) * (len(x.shape) - 2)], axis=1)
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  return tf.gather(x, indices, axis=1, batch_dims=1)
