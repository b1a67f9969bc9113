"""The decoder stack (paper section 3.1), with an incremental-decoding cache."""

import keras

from t2t_lite.layers import checks
from t2t_lite.layers.decoder_layer import DecoderLayer
from t2t_lite.layers.sublayers import LayerStack


@keras.saving.register_keras_serializable(package="t2t_lite")
class Decoder(LayerStack):
  """N identical `DecoderLayer`s (paper section 3.1: N = 6), in `self.layers`, plus a final
  LayerNorm when `norm_type="pre"`.

  Cache: `init_cache(memory, max_length)` returns `{"layer_0": <DecoderLayer cache>, ...}`; every
  leaf has batch as axis 0 (see `DecoderLayer`).

  Args:
    config: a `t2t_lite.hparams.ModelConfig`: N is its `num_decoder_layers`; each layer reads
      it as `EncoderLayer` does.
    **kwargs: standard `keras.layers.Layer` arguments.

  Call arguments:
    inputs: [B, T, d], the embedded shifted-right targets with positions added.
    memory: [B, S, d] encoder output (not needed with `cache`).
    memory_padding_mask: optional bool [B, S], True for real source tokens.
    cache: optional dict from `init_cache`.
    step: int scalar (may be traced) with `cache`: the position of `inputs[:, 0]`; or an int vector
      [B], each row's own position (see `MultiHeadAttention`).
    query_groups, self_attention_mask: optional, with `cache`: see `DecoderLayer`.
    return_attention_scores: also return `{"self": [...], "encdec": [...]}`, lists (one per
      layer) of weights [B, H, T, Tk].
    training: whether dropout is active.

  Returns:
    `outputs` [B, T, d], or a tuple `(outputs, scores, cache)` keeping `scores` only with
    `return_attention_scores=True` and the updated `cache` only when one was passed.

  Example:
  >>> decoder = Decoder(ModelConfig(hidden_size=8, num_heads=2, filter_size=32,
  ...                               num_decoder_layers=2))
  >>> memory = keras.random.normal((2, 6, 8))
  >>> tuple(decoder(keras.random.normal((2, 4, 8)), memory).shape)
  (2, 4, 8)
  """

  layer_class = DecoderLayer
  depth_field = "num_decoder_layers"

  def init_cache(self, memory, max_length, groups=None):
    """{"layer_i": {"self": {"k", "v"}, "memory": {"k", "v"}}} for decoding up to max_length
    (`groups`: see `DecoderLayer.init_cache`)."""
    return {f"layer_{i}": layer.init_cache(memory, max_length, groups)
            for i, layer in enumerate(self.layers)}

  def init_self_cache(self, batch_size, max_length, groups=None):
    """`init_cache`'s self-attention keys/values alone, zeros, without an encoder output:
    {"layer_i": {"k", "v"}} (a search's slots made before any sentence is encoded)."""
    return {f"layer_{i}": layer.self_attention.init_cache(batch_size, max_length, groups)
            for i, layer in enumerate(self.layers)}

  def memory_cache(self, memory):
    """`init_cache`'s encoder-decoder keys/values alone: {"layer_i": {"k", "v"}}, `memory`
    [B, S, d] projected once per layer."""
    checks.check_rank("memory", memory, (3,), "[batch, source_length, hidden_size]")
    return {f"layer_{i}": layer.encdec_attention.compute_memory_kv(memory)
            for i, layer in enumerate(self.layers)}

  def call(self, inputs, memory=None, memory_padding_mask=None, cache=None, step=None,
           query_groups=None, self_attention_mask=None, return_attention_scores=False,
           training=None):
    self.check_inputs(inputs)
    if cache is not None and (not isinstance(cache, dict) or len(cache) != self.num_layers):
      raise ValueError(f"`cache` must be the dict from Decoder.init_cache(memory, max_length) "
                       f"with one entry per layer ({self.num_layers}).")
    x, scores, new_cache = inputs, {"self": [], "encdec": []}, {}
    for i, layer in enumerate(self.layers):
      key = f"layer_{i}"
      x, layer_scores, *layer_cache = layer(
          x, memory=memory, memory_padding_mask=memory_padding_mask,
          cache=None if cache is None else cache[key], step=step,
          query_groups=query_groups, self_attention_mask=self_attention_mask,
          return_attention_scores=True, training=training)
      scores["self"].append(layer_scores["self"])
      scores["encdec"].append(layer_scores["encdec"])
      if cache is not None:
        new_cache[key] = layer_cache[0]
    x = self.normalize_output(x)
    return checks.call_results(x, scores if return_attention_scores else None,
                               None if cache is None else new_cache)
