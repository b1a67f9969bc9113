"""Helpers shared by the layers: argument checks, masks, the residual connection, initializers.

Everything here uses `keras.ops` only, so it runs on the TensorFlow and JAX backends.
"""

import keras
from keras import ops

NORM_TYPES = ("pre", "post")


def check_rate(name, value):
  """Raises a ValueError unless `value` is a dropout rate in [0, 1)."""
  if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
    raise ValueError(f"`{name}` must be a dropout rate in [0, 1), e.g. {name}=0.1; got {value!r}.")


def check_positive_int(name, value):
  if not isinstance(value, int) or isinstance(value, bool) or value < 1:
    raise ValueError(f"`{name}` must be a positive int, e.g. {name}=8; got {value!r}.")


def check_norm_type(norm_type):
  if norm_type not in NORM_TYPES:
    raise ValueError(f"`norm_type` must be 'pre' (T2T's later sets) or 'post' (the paper); "
                     f"got {norm_type!r}.")


def check_rank(name, tensor, ranks, shape_hint):
  """Raises a ValueError unless `tensor` has one of the ranks in `ranks`."""
  if len(tensor.shape) not in ranks:
    raise ValueError(f"`{name}` must have shape {shape_hint}; got shape {tuple(tensor.shape)}.")


def check_int_ids(name, ids, ranks, shape_hint):
  """Token ids must be an integer tensor with one of the given ranks."""
  ids = ops.convert_to_tensor(ids)
  if "int" not in keras.backend.standardize_dtype(ids.dtype):
    raise ValueError(f"`{name}` must hold integer token ids (cast with "
                     f"`keras.ops.cast({name}, 'int32')`); got dtype {ids.dtype}.")
  check_rank(name, ids, ranks, shape_hint)
  return ids


def check_bool_mask(name, mask, ranks, shape_hint):
  """Masks are boolean (True = may attend / is a real token) with one of the given ranks."""
  if mask is None:
    return None
  mask = ops.convert_to_tensor(mask)
  if keras.backend.standardize_dtype(mask.dtype) != "bool":
    raise ValueError(f"`{name}` must be a boolean tensor (True = may attend); got dtype "
                     f"{mask.dtype}. Convert it first, e.g. `keras.ops.not_equal(ids, 0)`.")
  check_rank(name, mask, ranks, shape_hint)
  return mask


def causal_mask(query_length, key_length=None, query_offset=0):
  """[Tq, Tk] bool: query i (at position query_offset + i) may attend to keys j <= its position."""
  key_length = query_length if key_length is None else key_length
  query_positions = ops.arange(query_length, dtype="int32") + ops.cast(query_offset, "int32")
  key_positions = ops.arange(key_length, dtype="int32")
  return ops.less_equal(key_positions[None, :], query_positions[:, None])


def padding_to_attention_mask(padding_mask):
  """[B, Tk] bool (True = real token) -> [B, 1, Tk], broadcastable to [B, Tq, Tk]."""
  return None if padding_mask is None else ops.expand_dims(padding_mask, 1)


def combine_masks(*masks):
  """Logical AND of the masks that are not None (None when all are)."""
  result = None
  for mask in masks:
    if mask is not None:
      result = mask if result is None else ops.logical_and(result, mask)
  return result


def residual(x, sublayer, norm, dropout, norm_type, training):
  """One sub-layer connection (paper section 3.1 and T2T's layer_prepostprocess).

  post: LayerNorm(x + Dropout(Sublayer(x)))   (the paper, `transformer_base_v1`)
  pre:  x + Dropout(Sublayer(LayerNorm(x)))   (T2T's later sets; the stack ends with a LayerNorm)
  """
  if norm_type == "pre":
    return x + dropout(sublayer(norm(x)), training=training)
  return norm(x + dropout(sublayer(x), training=training))


def project(x, kernel):
  """`x [N, d_in] @ kernel [d_in, d_out]`, the 2-D matmul of every projection.

  On TensorFlow, when 256 <= d_in <= d_out, the input gradient `dy @ kernel^T` multiplies by an
  explicitly transposed copy of the kernel instead of a matmul with `transpose_b`: oneDNN ran
  `[2048, k] x [512, k]^T` at 148-170 GFLOP/s here against 191-206 for the same product with the
  transpose made first (the QKV, output, encoder-decoder and first feed-forward projections of a
  d 512 model; `python scripts/bench_train.py --projection`). TF's graph optimizer folds a plain
  transpose back into the matmul, so the copy goes through `Snapshot`. Values and gradients are
  those of `ops.matmul`; other backends and shapes use it directly.
  """
  d_in, d_out = kernel.shape[0], kernel.shape[1]
  if keras.backend.backend() != "tensorflow" or not 256 <= d_in <= d_out:
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



def call_results(output, scores=None, cache=None):
  """A layer's return value: `output` alone, or the tuple `(output, scores, cache)` without the
  parts that are None (the attention scores when asked for, the cache when one was passed)."""
  results = (output,) + tuple(part for part in (scores, cache) if part is not None)
  return results[0] if len(results) == 1 else results
