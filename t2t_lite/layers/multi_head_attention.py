"""Multi-head scaled dot-product attention (paper sections 3.2.1 and 3.2.2)."""

import keras
from keras import ops

from t2t_lite.layers import checks, masks, projection
from t2t_lite.layers.dropout import Dropout


def write_rows(cache, new, step):
  """`cache` [B, H, L, d] with row b's `new` [B, H, T, d] written at positions step[b] ...
  step[b] + T - 1 (`step` int32 [B]; T static). A select over the L positions per query, not a
  slice: static shapes, for tf.function / XLA / jax.jit with L static. A position >= L is not
  written (the scalar path's `slice_update` would clamp it instead)."""
  length = new.shape[2]
  if length is None:
    raise ValueError("Per-row steps need a static query length (the decoder's input [B, T, d]).")
  positions = ops.arange(cache.shape[2], dtype="int32")[None, :]                       # [1, L]
  for t in range(length):
    hit = ops.equal(positions, ops.expand_dims(step + t, 1))                           # [B, L]
    cache = ops.where(hit[:, None, :, None], new[:, :, t:t + 1], cache)
  return cache


def write_row_slices(caches, updates, starts, axes):
  """Per-row writes of one decoding step, each a slice written in place: for every row b and
  cache i, `updates[i][b]` replaces the entries starts[b] ... starts[b] + n - 1 of
  `caches[i][b]` along `axes[i]` (n = updates[i].shape[axes[i]], static; `starts` int32 [B]).
  A row whose entries would reach past the cache's end is not written, as `write_rows` skips
  positions >= L. One loop over the rows (`ops.fori_loop`) writes every cache: a select over
  each cache (`write_rows`) reads and writes all of it every step, this only the new entries."""
  caches = [ops.convert_to_tensor(c) for c in caches]
  updates = [ops.convert_to_tensor(u) for u in updates]
  starts = ops.convert_to_tensor(starts, "int32")
  rows = ops.shape(caches[0])[0]
  valid = [ops.logical_and(starts >= 0, starts + u.shape[a] <= c.shape[a])
           for c, u, a in zip(caches, updates, axes)]                                  # [B] each
  clipped = [ops.clip(starts, 0, c.shape[a] - u.shape[a]) for c, u, a in zip(caches, updates, axes)]

  def body(b, caches):
    written = []
    for cache, update, axis, start, ok in zip(caches, updates, axes, clipped, valid):
      begin = [b] + [0] * (len(cache.shape) - 1)
      shape = [1] + list(update.shape[1:])
      row = ops.slice(update, list(begin), shape)
      begin[axis] = start[b]
      row = ops.where(ok[b], row, ops.slice(cache, begin, shape))  # skipped rows keep theirs
      written.append(ops.slice_update(cache, begin, row))
    return written
  return ops.fori_loop(0, rows, body, list(caches))


def write_group_rows(cache, new, step, keys_transposed=False):
  """A shared cache [B, H, L * g, d] (position p of slot j at index p * g + j) with slot j's
  `new` [B, H, T, g, d] written at positions step[b * g + j] ... + T - 1 (`step` int32 [B * g],
  T static): `write_rows` for a cache shared by groups of g rows. `keys_transposed`: the cache
  is laid out [B, H, d, L * g] (a shared cache's keys, see `MultiHeadAttention`)."""
  if keys_transposed:  # the same select on the entries-major view, back to [B, H, d, L * g]
    return ops.swapaxes(write_group_rows(ops.swapaxes(cache, 2, 3), new, step), 2, 3)
  groups = new.shape[3]
  length = cache.shape[2] // groups
  positions = ops.arange(length, dtype="int32")[None, :, None]                         # [1, L, 1]
  step = ops.reshape(step, (-1, 1, groups))                                            # [B, 1, g]
  slots = ops.reshape(cache, (-1, cache.shape[1], length, groups, cache.shape[3]))     # [B, H, L, g, d]
  for t in range(new.shape[2]):
    hit = ops.equal(positions, step + t)                                               # [B, L, g]
    slots = ops.where(hit[:, None, :, :, None], new[:, :, t:t + 1], slots)
  return ops.reshape(slots, (-1, cache.shape[1], length * groups, cache.shape[3]))


@keras.saving.register_keras_serializable(package="t2t_lite")
class MultiHeadAttention(keras.layers.Layer):
  """Multi-head attention, `Concat(head_1..head_h) W^O` with `head_i = softmax(Q K^T / sqrt(d_k)) V`.

  Paper sections 3.2.1 (scaled dot-product attention) and 3.2.2 (multi-head attention), as T2T's
  `common_attention.multihead_attention`: the projections have no biases (`use_bias=True` adds
  them to Q, K, V and W^O, as Marian's models have), queries are scaled by `d_k ** -0.5` before
  the dot product, `d_k = key_channels / num_heads`, `d_v = value_channels / num_heads`.

  Speed: each projection is one 2-D matmul over all `batch * length` positions. A self-attention
  layer has one fused `[d, 2 * key_channels + value_channels]` Q/K/V kernel; an encoder-decoder
  (`self_attention=False`) layer has a `[d, key_channels]` query kernel and a fused
  `[d_memory, key_channels + value_channels]` key/value kernel. Scores are batched matmuls over
  `[B, H, T, d_k]`. The softmax runs in float32 even under mixed precision; masked scores are set
  to -1e9 in float32 first.

  Incremental decoding (static shapes, for `tf.while_loop` / `jax.lax.while_loop` / XLA):
  - self-attention: `init_cache(batch_size, max_length)` preallocates zeros
    `{"k": [B, H, max_length, d_k], "v": [B, H, max_length, d_v]}` (T2T's head-major layout, so no
    per-step transpose of the cache). Calling with `cache=` and `step=` writes the new keys and
    values at `step` with `keras.ops.slice_update` and attends to positions `<= step`.
  - encoder-decoder attention: `compute_memory_kv(memory)` projects the encoder output once into
    `{"k": [B, H, S, d_k], "v": [B, H, S, d_v]}`; pass it as `cache=` at every step.
  - Grouped queries (`query_groups=g`, a beam search's hypotheses): the query rows come in
    groups of g consecutive rows that share one cache entry, `B * g` query rows for a cache of
    batch `B` (row `b * g + j` is hypothesis j of sentence b). Encoder-decoder attention then
    reads each sentence's memory keys/values once for its g queries (`[B, H, g * Tq, d] x
    [B, H, d, S]`) rather than from g tiled copies; `attention_mask` has the memory's batch,
    [B, 1, S]. A self-attention cache shared by a group, `init_cache(batch_size, max_length,
    groups=g)`, is `{"kt": [B, H, d_k, max_length * g], "v": [B, H, max_length * g, d_v]}`,
    position p of row j at index `p * g + j`: a step writes the g rows' keys/values at one
    contiguous place (one slice write, as ungrouped), and every query attends over all the
    max_length * g cached entries of its sentence, `attention_mask` [B, g * Tq, max_length * g]
    saying which are its own history (the causal rule, on positions `index // g`, is applied
    here); the keys/values stay where they were written and only that mask follows the
    hypotheses (a beam search's lineage, see `Transformer.decode_step`). The attention weights
    are returned per query row, [B * g, H, Tq, Tk].
  - Keys stored transposed, "kt" [B, H, d_k, Tk] in place of "k" [B, H, Tk, d_k] (a grouped
    self-attention cache always; memory keys from `compute_memory_kv(memory,
    transposed_keys=True)`): with g > 1 query rows per cache entry XLA's CPU dot runs `q kt`
    faster than `q k^T`, which it computes through a transposed copy of the keys; with one
    query row `q k^T` is the faster (measured in docs/performance.md).

  Args:
    num_heads: h, the number of heads.
    key_channels: h * d_k, total query/key width. Defaults to the query width.
    value_channels: h * d_v, total value width. Defaults to the query width.
    output_channels: width of the output projection W^O. Defaults to the query width.
    attention_dropout: dropout rate on the attention weights (T2T's `attention_dropout`).
    self_attention: True for self-attention (keys and values come from the query input),
      False for encoder-decoder attention (keys and values come from `memory`).
    use_bias: add a bias after each projection (fused like the kernels: `qkv_bias` or `q_bias`
      and `kv_bias`, and `output_bias`).
    **kwargs: standard `keras.layers.Layer` arguments (name, dtype, ...).

  Call arguments:
    query: float tensor [B, Tq, d].
    memory: float tensor [B, Tk, d_memory]; only for `self_attention=False` and no `cache`.
    attention_mask: optional bool tensor broadcastable to [B, Tq, Tk] (rank 2 [Tq, Tk] or rank 3,
      e.g. [B, 1, Tk] for padding); True = may attend.
    cache: self-attention: the dict from `init_cache` (requires `step`); encoder-decoder: the dict
      from `compute_memory_kv` (replaces `memory`).
    query_groups: with `cache`: the query rows come in groups of this many rows sharing one
      cache entry (grouped queries, above); the cache's batch is the query's / query_groups.
    step: int scalar (may be a traced tensor): position of the first query in the cache; or an
      int vector [B], each row's own position: rows at different steps, e.g. a search whose
      slots are refilled with new sentences, which restart at position 0 (one query position:
      `write_row_slices`, a slice per row; several: `write_rows`, a select). With
      `query_groups=g` the vector has the B * g query rows' steps, equal within a group.
    return_attention_scores: also return the attention weights [B, H, Tq, Tk] (float32).
    training: whether dropout is active.

  Returns:
    `output` [B, Tq, output_channels], or a tuple `(output, weights, cache)` keeping `weights` only
    when `return_attention_scores=True` and `cache` (updated for self-attention, unchanged for
    encoder-decoder attention) only when a cache was passed.

  Example:
  >>> layer = MultiHeadAttention(num_heads=2)
  >>> x = keras.random.normal((3, 5, 8))
  >>> causal = keras.ops.tril(keras.ops.ones((5, 5), "bool"))
  >>> tuple(layer(x, attention_mask=causal).shape)
  (3, 5, 8)
  >>> cache = layer.init_cache(batch_size=3, max_length=5)
  >>> y, cache = layer(x[:, :1], cache=cache, step=0)
  """

  def __init__(self, num_heads: int, key_channels: int | None = None,
               value_channels: int | None = None, output_channels: int | None = None,
               attention_dropout: float = 0.0, self_attention: bool = True, use_bias: bool = False,
               **kwargs):
    super().__init__(**kwargs)
    checks.check_positive_int("num_heads", num_heads)
    for name, value in (("key_channels", key_channels), ("value_channels", value_channels),
                        ("output_channels", output_channels)):
      if value is not None:
        checks.check_positive_int(name, value)
    checks.check_rate("attention_dropout", attention_dropout)
    self.num_heads = num_heads
    self._check_divisible(key_channels=key_channels, value_channels=value_channels)
    self.key_channels = key_channels
    self.value_channels = value_channels
    self.output_channels = output_channels
    self.attention_dropout = attention_dropout
    self.self_attention = bool(self_attention)
    self.use_bias = bool(use_bias)

  def build(self, query_shape, memory_shape=None):
    query_dim = query_shape[-1]
    if query_dim is None:
      raise ValueError("MultiHeadAttention needs a known last dimension of `query`; got shape "
                       f"{tuple(query_shape)}.")
    self._key_channels = self.key_channels or query_dim
    self._value_channels = self.value_channels or query_dim
    self._output_channels = self.output_channels or query_dim
    self._check_divisible(key_channels=self._key_channels, value_channels=self._value_channels)
    self._key_depth = self._key_channels // self.num_heads      # d_k
    self._value_depth = self._value_channels // self.num_heads  # d_v
    kc, vc = self._key_channels, self._value_channels
    if self.self_attention:
      self.qkv_kernel = self.add_weight(
          name="qkv_kernel", shape=(query_dim, 2 * kc + vc),
          initializer=projection.fused_glorot_uniform([kc, kc, vc]))
    else:
      memory_dim = query_dim if memory_shape is None else memory_shape[-1]
      self.q_kernel = self.add_weight(name="q_kernel", shape=(query_dim, kc),
                                      initializer="glorot_uniform")
      self.kv_kernel = self.add_weight(
          name="kv_kernel", shape=(memory_dim, kc + vc),
          initializer=projection.fused_glorot_uniform([kc, vc]))
    self.output_kernel = self.add_weight(name="output_kernel", shape=(vc, self._output_channels),
                                         initializer="glorot_uniform")
    if self.use_bias:
      sizes = ({"qkv_bias": 2 * kc + vc} if self.self_attention else {"q_bias": kc, "kv_bias": kc + vc})
      for name, size in {**sizes, "output_bias": self._output_channels}.items():
        setattr(self, name, self.add_weight(name=name, shape=(size,), initializer="zeros"))
    self.weights_dropout = Dropout(self.attention_dropout, dtype=self.dtype_policy)

  def _check_divisible(self, **channels):
    for name, value in channels.items():
      if value is not None and value % self.num_heads:
        raise ValueError(f"`{name}` ({value}) must be divisible by num_heads ({self.num_heads}); "
                         f"pick {name} = num_heads * depth per head.")

  # Projections: one 2-D matmul over [batch * length, d], then a split into heads.

  def _kernel(self, variable):
    return ops.cast(variable, self.compute_dtype)

  def _project(self, x, kernel, bias_name):
    """[B, T, d] @ [d, n] (+ the bias `bias_name` with use_bias) as a 2-D matmul -> [B * T, n]."""
    x = ops.cast(x, self.compute_dtype)
    projected = projection.project(ops.reshape(x, (-1, checks.dim(x, -1))), self._kernel(kernel))
    return projected + self._kernel(getattr(self, bias_name)) if self.use_bias else projected

  def _split_heads(self, x, length, depth):
    """[B * T, H * depth] -> [B, H, T, depth]."""
    return ops.transpose(ops.reshape(x, (-1, length, self.num_heads, depth)), (0, 2, 1, 3))

  def _project_qkv(self, query):
    length = checks.dim(query, 1)
    kc = self._key_channels
    q, k, v = projection.split(self._project(query, self.qkv_kernel, "qkv_bias"),
                               (kc, kc, self._value_channels))
    return (self._split_heads(q, length, self._key_depth),
            self._split_heads(k, length, self._key_depth),
            self._split_heads(v, length, self._value_depth))

  def compute_memory_kv(self, memory, transposed_keys=False):
    """Projects encoder output [B, S, d_memory] once into {"k": [B,H,S,d_k], "v": [B,H,S,d_v]};
    with `transposed_keys`, {"kt": [B, H, d_k, S], "v"} (for grouped queries: see above)."""
    if self.self_attention:
      raise ValueError("compute_memory_kv is for encoder-decoder attention; this layer has "
                       "self_attention=True. Use init_cache(batch_size, max_length) instead.")
    checks.check_rank("memory", memory, (3,), "[batch, memory_length, channels]")
    length = checks.dim(memory, 1)
    k, v = projection.split(self._project(memory, self.kv_kernel, "kv_bias"),
                            (self._key_channels, self._value_channels))
    v = self._split_heads(v, length, self._value_depth)
    if transposed_keys:  # [B * S, H * d_k] -> [B, H, d_k, S]
      k = ops.reshape(k, (-1, length, self.num_heads, self._key_depth))
      return {"kt": ops.transpose(k, (0, 2, 3, 1)), "v": v}
    return {"k": self._split_heads(k, length, self._key_depth), "v": v}

  def init_cache(self, batch_size, max_length, groups=None):
    """Zeros {"k": [B, H, max_length, d_k], "v": [B, H, max_length, d_v]} for self-attention;
    with `groups=g` > 1, a cache shared by groups of g query rows, its keys transposed:
    {"kt": [B, H, d_k, max_length * g], "v": [B, H, max_length * g, d_v]}."""
    if not self.self_attention:
      raise ValueError("init_cache is for self-attention; for encoder-decoder attention use "
                       "compute_memory_kv(memory).")
    entries = max_length * (groups or 1)
    values = ops.zeros((batch_size, self.num_heads, entries, self._value_depth), self.compute_dtype)
    if groups and groups > 1:
      return {"kt": ops.zeros((batch_size, self.num_heads, self._key_depth, entries),
                              self.compute_dtype), "v": values}
    return {"k": ops.zeros((batch_size, self.num_heads, entries, self._key_depth), self.compute_dtype),
            "v": values}

  def _check_call(self, query, memory, attention_mask, cache, step):
    checks.check_rank("query", query, (3,), "[batch, query_length, channels]")
    if self.self_attention and memory is not None:
      raise ValueError("This MultiHeadAttention has self_attention=True and takes no `memory`; "
                       "build one with self_attention=False for encoder-decoder attention.")
    if not self.self_attention and memory is None and cache is None:
      raise ValueError("Encoder-decoder attention (self_attention=False) needs `memory` "
                       "[batch, memory_length, channels] or `cache=layer.compute_memory_kv(memory)`.")
    if memory is not None:
      checks.check_rank("memory", memory, (3,), "[batch, memory_length, channels]")
    if cache is not None and (not isinstance(cache, dict)
                              or set(cache) not in ({"k", "v"}, {"kt", "v"})):
      raise ValueError("`cache` must be the dict {'k', 'v'} (or {'kt', 'v'}: keys transposed) "
                       "from init_cache / compute_memory_kv; "
                       f"got {type(cache).__name__}"
                       f"{sorted(cache) if isinstance(cache, dict) else ''}.")
    if self.self_attention and (cache is None) != (step is None):
      raise ValueError("Self-attention decoding needs both `cache` (from init_cache) and `step` "
                       "(the position of the first query); pass both or neither.")
    if step is not None:
      checks.check_step(step, query.shape[0])
    return checks.check_bool_mask("attention_mask", attention_mask, (2, 3),
                                  "[query_length, key_length] or [batch, query_length, key_length]")

  def call(self, query, memory=None, attention_mask=None, cache=None, step=None,
           return_attention_scores=False, training=None, query_groups=None):
    attention_mask = self._check_call(query, memory, attention_mask, cache, step)
    query_length = checks.dim(query, 1)
    groups = query_groups if cache is not None and query_groups not in (None, 1) else None
    transposed = cache is not None and "kt" in cache
    if self.self_attention and cache is not None and transposed != bool(groups):
      raise ValueError("A self-attention cache shared by groups of query rows ('kt': from "
                       "init_cache(..., groups=g)) needs query_groups=g, and one from "
                       "init_cache(batch_size, max_length) ('k') none: pass the query_groups "
                       "the cache was made with.")
    if self.self_attention and groups:
      q, k, v, cache, attention_mask = self._grouped_cache_step(query, attention_mask, cache,
                                                                step, groups)
    elif self.self_attention:
      q, k, v = self._project_qkv(query)  # [B, H, Tq, d_k], [B, H, Tq, d_k], [B, H, Tq, d_v]
      if cache is not None:
        step = ops.cast(step, "int32")
        if len(step.shape) == 0:  # one step for the batch: one slice write
          k = ops.slice_update(cache["k"], (0, 0, step, 0), k)  # [B, H, max_length, d_k]
          v = ops.slice_update(cache["v"], (0, 0, step, 0), v)
        elif k.shape[2] == 1:  # a step per row [B], one position each: a slice per row
          k, v = write_row_slices([cache["k"], cache["v"]], [k, v], step, [2, 2])
        else:  # a step per row [B], several positions: a select over the cache
          k, v = write_rows(cache["k"], k, step), write_rows(cache["v"], v, step)
        cache = {"k": k, "v": v}
        attention_mask = masks.combine_masks(
            masks.causal_mask(ops.shape(q)[2], ops.shape(k)[2], query_offset=step),
            attention_mask)
    else:
      memory_kv = cache if cache is not None else self.compute_memory_kv(memory)
      k, v = memory_kv["kt" if transposed else "k"], memory_kv["v"]  # kt: [B, H, d_k, Tk]
      projected = self._project(query, self.q_kernel, "q_bias")               # [B * Tq, H * d_k]
      q = self._split_heads(projected, query_length * (groups or 1), self._key_depth)
    output, weights = self._attend(q, k, v, attention_mask, training, query_length, transposed)
    if return_attention_scores and groups:  # [B, H, g * Tq, Tk] -> [B * g, H, Tq, Tk]
      keys = checks.dim(weights, -1)
      weights = ops.reshape(weights, (-1, self.num_heads, groups, query_length, keys))
      weights = ops.reshape(ops.transpose(weights, (0, 2, 1, 3, 4)),
                            (-1, self.num_heads, query_length, keys))
    return checks.call_results(output, weights if return_attention_scores else None, cache)

  def _grouped_cache_step(self, query, attention_mask, cache, step, groups):
    """Self-attention over a cache shared by groups of g query rows ({"kt": [B, H, d_k, L * g],
    "v": [B, H, L * g, d_v]}; see the class docstring): writes each row's keys/values at `step`
    (a scalar or [B * g]) and returns q [B, H, g * Tq, d_k], the new keys (transposed) and
    values, the new cache and the mask [B or 1, g * Tq, L * g]: `attention_mask` and the causal
    rule."""
    query_length = query.shape[1]
    if query_length is None:
      raise ValueError("A shared self-attention cache needs a static query length ([B, T, d]).")
    entries = cache["v"].shape[2]                                               # L * g
    kc = self._key_channels
    q, k, v = projection.split(self._project(query, self.qkv_kernel, "qkv_bias"),
                               (kc, kc, self._value_channels))
    q = self._split_heads(q, groups * query_length, self._key_depth)         # [B, H, g * Tq, d_k]

    def slots(x, depth):  # [B * g * Tq, H * depth] -> [B, H, Tq, g, depth]
      x = ops.reshape(x, (-1, groups, query_length, self.num_heads, depth))
      return ops.transpose(x, (0, 3, 2, 1, 4))

    k, v = slots(k, self._key_depth), slots(v, self._value_depth)
    step = ops.cast(step, "int32")
    if len(step.shape) == 0:  # the g rows' positions step ... step + Tq - 1: one slice
      flat = lambda t: ops.reshape(t, (-1, self.num_heads, query_length * groups, t.shape[-1]))  # noqa: E731
      k = ops.slice_update(cache["kt"], (0, 0, 0, step * groups),
                           ops.swapaxes(flat(k), 2, 3))                      # [B, H, d_k, L * g]
      v = ops.slice_update(cache["v"], (0, 0, step * groups, 0), flat(v))    # [B, H, L * g, d_v]
      query_positions = ops.tile(step + ops.arange(query_length, dtype="int32"), (groups,))
      query_positions = query_positions[None, :, None]                      # [1, g * Tq, 1]
    else:  # a step per row [B * g], the same for a group's g rows (a beam's hypotheses)
      if query_length == 1:  # one slice per group: [H, d, g] keys, [H, g, d] values
        group_step = ops.reshape(step, (-1, groups))[:, 0]                    # [B]
        k, v = write_row_slices(
            [cache["kt"], cache["v"]], [ops.transpose(k, (0, 1, 4, 2, 3))[:, :, :, 0], v[:, :, 0]],
            group_step * groups, [3, 2])
      else:  # several positions: a select over the cache
        k = write_group_rows(cache["kt"], k, step, keys_transposed=True)
        v = write_group_rows(cache["v"], v, step)
      query_positions = (ops.expand_dims(step, 1)
                         + ops.arange(query_length, dtype="int32")[None, :])  # [B * g, Tq]
      query_positions = ops.reshape(query_positions, (-1, groups * query_length, 1))  # [B, g*Tq, 1]
    key_positions = ops.arange(entries, dtype="int32")[None, None, :] // groups  # [1, 1, L * g]
    causal = ops.less_equal(key_positions, query_positions)                 # [B or 1, g*Tq, L*g]
    return q, k, v, {"kt": k, "v": v}, masks.combine_masks(causal, attention_mask)

  def _attend(self, q, k, v, attention_mask, training, query_length, keys_transposed=False):
    """softmax(q k^T / sqrt(d_k)) v over heads, then W^O.

    q [B, H, Tq, d_k], or grouped [B, H, g * Tq, d_k] for keys [B, H, Tk, d_k] (the mask then
    [B or 1, g * Tq or 1, Tk]); `keys_transposed`: k is [B, H, d_k, Tk]. Returns
    ([B * g, Tq, out], weights [B, H, g * Tq, Tk])."""
    q = q * ops.cast(self._key_depth ** -0.5, q.dtype)
    scores = ops.matmul(q, k if keys_transposed else ops.swapaxes(k, -1, -2))  # [B, H, Tq, Tk]
    scores = ops.cast(scores, "float32")
    if attention_mask is not None:
      if len(attention_mask.shape) == 2:
        attention_mask = attention_mask[None]
      scores = ops.where(ops.expand_dims(attention_mask, 1), scores, -1e9)  # mask [B, 1, Tq, Tk]
    weights = ops.softmax(scores, axis=-1)  # float32 [B, H, Tq, Tk]
    probs = self.weights_dropout(ops.cast(weights, v.dtype), training=training)
    context = ops.matmul(probs, v)  # [B, H, Tq, d_v]
    context = ops.reshape(ops.transpose(context, (0, 2, 1, 3)), (-1, self._value_channels))
    output = projection.project(context, self._kernel(self.output_kernel))  # [B * Tq, out]
    if self.use_bias:
      output = output + self._kernel(self.output_bias)
    return ops.reshape(output, (-1, query_length, self._output_channels)), weights

  def get_config(self):
    config = super().get_config()
    config.update({
        "num_heads": self.num_heads,
        "key_channels": self.key_channels,
        "value_channels": self.value_channels,
        "output_channels": self.output_channels,
        "attention_dropout": self.attention_dropout,
        "self_attention": self.self_attention,
        "use_bias": self.use_bias,
    })
    return config
