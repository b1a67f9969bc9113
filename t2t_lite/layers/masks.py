"""Attention masks: boolean, True = may attend (paper section 3.2.3, "masking out ... illegal
connections"). `keras.ops` only, so they run on the TensorFlow and JAX backends."""

from keras import ops


def causal_mask(query_length, key_length=None, query_offset=0):
  """[Tq, Tk] bool: query i (at position query_offset + i) may attend to keys j <= its position.

  `query_offset` is a scalar (may be traced), or an int vector [B], one offset per row (rows
  decoding at their own step): then the mask is [B, Tq, Tk]."""
  key_length = query_length if key_length is None else key_length
  query_offset = ops.cast(query_offset, "int32")
  key_positions = ops.arange(key_length, dtype="int32")
  if len(query_offset.shape) == 1:
    query_positions = (ops.expand_dims(query_offset, 1)
                       + ops.arange(query_length, dtype="int32")[None, :])             # [B, Tq]
    return ops.less_equal(key_positions[None, None, :], query_positions[:, :, None])  # [B, Tq, Tk]
  query_positions = ops.arange(query_length, dtype="int32") + query_offset
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
