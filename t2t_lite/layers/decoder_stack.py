"""The decoder stack (paper section 3.1), with an incremental-decoding cache."""

import keras

from t2t_lite.layers import checks
from t2t_lite.layers.decoder_layer import DecoderLayer
from t2t_lite.layers.sublayers import LayerStack


def join_layer_caches(self_cache, memory_cache):
  """The cache `Decoder` takes, {"layer_i": {"self": {"k", "v"}, "memory": {"k", "v"}}}, from
  its two parts: `Decoder.init_self_cache`'s and `Decoder.memory_cache`'s (keys of `self_cache`
  that name no layer, such as a search's "lineage", are left out)."""
  return {name: {"self": self_cache[name], "memory": memory_kv}
          for name, memory_kv in memory_cache.items()}


def split_layer_caches(cache):
  """The inverse of `join_layer_caches`: `Decoder`'s cache -> (self_cache, memory_cache), each
  {"layer_i": {"k", "v"}}."""
  return ({name: layer["self"] for name, layer in cache.items()},
          {name: layer["memory"] for name, layer in cache.items()})


@keras.saving.register_keras_serializable(package="t2t_lite")
class Decoder(LayerStack):
  """N identical `DecoderLayer`s (paper section 3.1: N = 6), in `self.layers`, plus a final
  LayerNorm when `norm_type="pre"`.

  Cache: `join_layer_caches(init_self_cache(B, max_length), memory_cache(memory))` is
  `{"layer_0": <DecoderLayer cache>, ...}`; every leaf has batch as axis 0 (see `DecoderLayer`).

  Args:
    config: a `t2t_lite.hparams.ModelConfig`: N is its `num_decoder_layers`; each layer reads
      it as `EncoderLayer` does.
    **kwargs: standard `keras.layers.Layer` arguments.

  Call arguments:
    inputs: [B, T, d], the embedded shifted-right targets with positions added.
    memory: [B, S, d] encoder output (not needed with `cache`).
    memory_padding_mask: optional bool [B, S], True for real source tokens.
    cache: optional dict from `join_layer_caches` (see Cache above).
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
  >>> cache = join_layer_caches(decoder.init_self_cache(2, max_length=4),
  ...                           decoder.memory_cache(memory))
  >>> y, cache = decoder(keras.random.normal((2, 1, 8)), cache=cache, step=0)
  """

  layer_class = DecoderLayer
  depth_field = "num_decoder_layers"

  def init_self_cache(self, batch_size, max_length, groups=None):
    """The cache's self-attention keys/values, zeros, made without an encoder output:
    {"layer_i": {"k", "v": [B, H, max_length, d]}} (a search's slots are made before any
    sentence is encoded). With `groups=g`, a cache shared by groups of g rows, {"kt": [B, H,
    d, max_length * g], "v": [B, H, max_length * g, d]} (`MultiHeadAttention`'s grouped queries:
    a beam search's hypotheses)."""
    return {f"layer_{i}": layer.self_attention.init_cache(batch_size, max_length, groups)
            for i, layer in enumerate(self.layers)}

  def memory_cache(self, memory, transposed_keys=False):
    """The cache's encoder-decoder keys/values: {"layer_i": {"k", "v": [B, H, S, d]}}, `memory`
    [B, S, d] projected once per layer (`transposed_keys`: {"kt": [B, H, d, S], "v"}, for
    grouped queries)."""
    checks.check_rank("memory", memory, (3,), "[batch, source_length, hidden_size]")
    return {f"layer_{i}": layer.encdec_attention.compute_memory_kv(memory, transposed_keys)
            for i, layer in enumerate(self.layers)}

  def call(self, inputs, memory=None, memory_padding_mask=None, cache=None, step=None,
           query_groups=None, self_attention_mask=None, return_attention_scores=False,
           training=None):
    self.check_inputs(inputs)
    if cache is not None and (not isinstance(cache, dict) or len(cache) != self.num_layers):
      raise ValueError(f"`cache` must be the dict from join_layer_caches(init_self_cache(batch, "
                       f"max_length), memory_cache(memory)) with one entry per layer "
                       f"({self.num_layers}).")
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
