"""One decoder layer: masked self-attention, encoder-decoder attention, FFN (paper section 3.1)."""

import keras
from keras import ops

from t2t_lite.layers import checks, masks
from t2t_lite.layers.sublayers import ConfiguredLayer


@keras.saving.register_keras_serializable(package="t2t_lite")
class DecoderLayer(ConfiguredLayer):
  """Masked self-attention, encoder-decoder attention and a position-wise FFN (paper section 3.1).

  Each sub-layer sits in a residual connection, post-norm (the paper) or pre-norm (T2T's later
  sets), as in `EncoderLayer`. Self-attention is causal: position i sees positions <= i.

  Incremental decoding: the cache is `{"self": {"k": [B, H, max_length, d_k], "v": [B, H,
  max_length, d_v]}, "memory": {"k": [B, H, S, d_k], "v": [B, H, S, d_v]}}`: preallocated
  self-attention keys and values, and the encoder output's keys and values, projected once: one
  layer's entry of `Decoder`'s cache (`join_layer_caches`). Call with `cache=` and `step=` to run
  positions `step ... step + T - 1`; `memory` is then not needed.

  Args:
    config: a `t2t_lite.hparams.ModelConfig`, read as by `EncoderLayer`.
    **kwargs: standard `keras.layers.Layer` arguments.

  Call arguments:
    inputs: [B, T, d] decoder input (embedded, shifted-right targets).
    memory: [B, S, d] encoder output (not needed with `cache`).
    memory_padding_mask: optional bool [B, S], True for real source tokens.
    cache: optional dict, one layer's entry of `Decoder`'s cache (see above).
    step: int scalar (may be traced) with `cache`: position of `inputs[:, 0]`; or an int vector
      [B], each row's own position (see `MultiHeadAttention`).
    query_groups: with a `cache` made with `groups=g`: g, the rows of `inputs`
      ([B * g, T, d]) that share each sentence's cache entries (`MultiHeadAttention`'s grouped
      queries).
    self_attention_mask: optional bool mask of the cached keys each query may see besides the
      causal rule, with `cache`: [B, T, max_length]; with `query_groups=g`,
      [B, g * T, max_length * g] (see `MultiHeadAttention`).
    return_attention_scores: also return `{"self": [B, H, T, T or max_length],
      "encdec": [B, H, T, S]}` attention weights.
    training: whether dropout is active.

  Returns:
    `outputs` [B, T, d], or a tuple `(outputs, scores, cache)` keeping `scores` only with
    `return_attention_scores=True` and the updated `cache` only when one was passed.

  Example:
  >>> layer = DecoderLayer(ModelConfig(hidden_size=8, num_heads=2, filter_size=32))
  >>> memory = keras.random.normal((2, 6, 8))
  >>> tuple(layer(keras.random.normal((2, 4, 8)), memory).shape)
  (2, 4, 8)
  """

  def build(self, input_shape):
    self.self_attention = self.make_attention("self_attention", input_shape, self_attention=True)
    self.self_attention_norm = self.make_norm("self_attention_norm", input_shape)
    self.encdec_attention = self.make_attention("encdec_attention", input_shape,
                                                self_attention=False)
    self.encdec_attention_norm = self.make_norm("encdec_attention_norm", input_shape)
    self.feed_forward = self.make_feed_forward(input_shape)
    self.feed_forward_norm = self.make_norm("feed_forward_norm", input_shape)
    self.residual_dropout = self.make_residual_dropout()

  def call(self, inputs, memory=None, memory_padding_mask=None, cache=None, step=None,
           query_groups=None, self_attention_mask=None, return_attention_scores=False,
           training=None):
    self.check_inputs(inputs)
    memory_padding_mask = checks.check_bool_mask("memory_padding_mask", memory_padding_mask, (2,),
                                                 "[batch, source_length]")
    if cache is None:
      if memory is None:
        raise ValueError("DecoderLayer needs `memory` (the encoder output [batch, source_length, "
                         "hidden_size]) or a `cache` (see join_layer_caches).")
      causal = masks.causal_mask(ops.shape(inputs)[1])  # [T, T]
    elif not isinstance(cache, dict) or set(cache) != {"self", "memory"}:
      raise ValueError("`cache` must be one layer's entry of join_layer_caches(...): a dict with "
                       "keys 'self' and 'memory'.")
    elif step is None:
      raise ValueError("Decoding with `cache` needs `step`, the position of inputs[:, 0].")
    memory_mask = masks.padding_to_attention_mask(memory_padding_mask)  # [B, 1, S]
    scores, new_cache = {}, {}

    def self_attend(x):
      if cache is None:
        output, scores["self"] = self.self_attention(
            x, attention_mask=causal, return_attention_scores=True, training=training)
      else:
        output, scores["self"], new_cache["self"] = self.self_attention(
            x, cache=cache["self"], step=step, attention_mask=self_attention_mask,
            query_groups=query_groups, return_attention_scores=True, training=training)
      return output

    def encdec_attend(x):
      output, scores["encdec"], *_ = self.encdec_attention(
          x, memory=memory if cache is None else None, attention_mask=memory_mask,
          cache=None if cache is None else cache["memory"], query_groups=query_groups,
          return_attention_scores=True, training=training)
      return output

    x = self.residual(inputs, self_attend, self.self_attention_norm, training)
    x = self.residual(x, encdec_attend, self.encdec_attention_norm, training)
    x = self.residual(x, lambda y: self.feed_forward(y, training=training), self.feed_forward_norm,
                      training)
    return checks.call_results(
        x, scores if return_attention_scores else None,
        None if cache is None else {"self": new_cache["self"], "memory": cache["memory"]})
