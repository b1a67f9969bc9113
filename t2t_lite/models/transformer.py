"""The Transformer of "Attention Is All You Need" (paper section 3) as one Keras model.

    source ids [B, S] --SharedEmbedding * sqrt(d) + positions, dropout--> Encoder --> memory
    targets [B, T] --shift right (start id 0)--> same embedding + positions, dropout
        --> Decoder(memory) --> x @ E^T (the same embedding matrix) --> float32 logits [B, T, V]

Training uses `call` (teacher forcing); decoding uses `encode`, `init_cache` and `decode_step`,
which work inside `tf.function` / `tf.while_loop` / `jax.jit` with a traced `step` (a scalar, or
one position per row).
"""

import keras
from keras import ops

from t2t_lite import registry
from t2t_lite.hparams.model_config import ModelConfig
from t2t_lite.layers import checks
from t2t_lite.layers.decoder_stack import Decoder, join_layer_caches, split_layer_caches
from t2t_lite.layers.dropout import Dropout
from t2t_lite.layers.encoder_stack import Encoder
from t2t_lite.layers.learned_position_embedding import LearnedPositionEmbedding
from t2t_lite.layers.shared_embedding import SharedEmbedding
from t2t_lite.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from t2t_lite.layers.symbol_dropout import SymbolDropout
from t2t_lite.token_ids import PAD_ID, START_ID

# `position_encoding` -> SinusoidalPositionEncoding's (frequencies, layout).
SINUSOIDS = {"sinusoid": ("t2t", "concat"), "sinusoid_paper": ("paper", "interleave"),
             "sinusoid_paper_halves": ("paper", "concat")}


def write_lineage(lineage, step, groups):
  """`lineage` int32 [B * g, L] with `lineage[r, step] = r % g` (`step` a scalar or [B * g]): the
  row that decodes position `step` writes it in its own slot of the shared cache."""
  rows, length = ops.shape(lineage)[0], lineage.shape[1]
  own = ops.expand_dims(ops.arange(rows, dtype="int32") % groups, 1)            # [B * g, 1]
  step = ops.expand_dims(step, 1) if len(step.shape) == 1 else step             # [B * g, 1] or []
  return ops.where(ops.arange(length, dtype="int32") == step, own, lineage)     # [B * g, L]


def lineage_mask(lineage, groups):
  """The cache entries each hypothesis may attend to in its sentence's shared cache:
  lineage int32 [B * g, L] -> bool [B, g, L * g], True at (b, j, p * g + k) where row k wrote
  position p of hypothesis j's history (`lineage[b * g + j, p] == k`); the causal rule (p <=
  step) is the attention layer's."""
  length = lineage.shape[1]
  rows = ops.arange(groups, dtype="int32")                                      # [g]
  mask = ops.equal(ops.expand_dims(lineage, 2), rows)                           # [B * g, L, g]
  return ops.reshape(mask, (-1, groups, length * groups))                       # [B, g, L * g]


def split_cache(cache):
  """`Transformer.init_cache`'s dict -> (growing, fixed).

  growing: {"layer_i": self-attention {"k", "v"}}, written at every step and reordered with the
  beams (a cache shared by the beams: and "lineage", which alone is reordered); fixed:
  {"source_mask", "memory": {"layer_i": {"k", "v"}}}, the same for every beam.
  """
  growing, memory = split_layer_caches(cache["decoder"])
  if "lineage" in cache:
    growing["lineage"] = cache["lineage"]
  return growing, {"source_mask": cache["source_mask"], "memory": memory}


def join_cache(growing, fixed):
  """The inverse of `split_cache`."""
  cache = {"source_mask": fixed["source_mask"],
           "decoder": join_layer_caches(growing, fixed["memory"])}
  if "lineage" in growing:
    cache["lineage"] = growing["lineage"]
  return cache


@registry.models.register
@keras.saving.register_keras_serializable(package="t2t_lite")
class Transformer(keras.Model):
  """Encoder-decoder Transformer with one shared embedding / softmax matrix (paper section 3),
  or T2T's separate ones (`shared_embedding_and_softmax_weights=false`, e.g. its parsing set).

  Args:
    config: a `t2t_lite.hparams.ModelConfig` (an HParams is one: `get_hparams("big")`), the
      architecture: hidden_size (d_model), filter_size (d_ff), num_heads (h),
      num_encoder_layers / num_decoder_layers (N), attention_key_channels /
      attention_value_channels (h * d_k, h * d_v; 0: d_model), norm_type ("pre", T2T's later
      sets, or "post", the paper), layer_norm_epsilon, layer_prepostprocess_dropout (residual and
      embedding dropout, P_drop), attention_dropout, relu_dropout, position_encoding
      ("sinusoid", T2T's concatenated sin/cos layout, see `SinusoidalPositionEncoding`;
      "sinusoid_paper", the paper's formula; "sinusoid_paper_halves", its frequencies in T2T's
      layout; or "learned", Table 3 row E) and max_position (rows of the learned position table);
      the switches of imported models (all off in T2T's sets): attention_bias, ffn_activation,
      logits_bias, scale_embeddings, decoder_start ("zeros": the start symbol and PAD embed to
      zeros, as T2T's `shift_right_3d` and Marian do; "pad_embedding": to PAD's row of the table,
      as Hugging Face's Marian models do), never_predict_pad (decode_step gives PAD a logit of
      -1e9: an imported Marian model's PAD row was added by the conversion, Marian's softmax has
      no PAD). Stored as `self.config` (its architecture part only).
    vocab_size: V, the shared source/target vocabulary (ids as `t2t_lite.token_ids`).
    **kwargs: standard `keras.Model` arguments (name, dtype, ...).

  Call arguments:
    inputs: dict {"inputs": int [B, S], "targets": int [B, T]}, 0-padded.
    training: whether dropout is active.

  Returns:
    float32 logits [B, T, V]: position t predicts targets[:, t] from targets[:, :t].

  Example:
  >>> config = ModelConfig(hidden_size=32, filter_size=64, num_heads=4, num_encoder_layers=2,
  ...                      num_decoder_layers=2)
  >>> model = Transformer(config, vocab_size=100)     # or Transformer(get_hparams("base"), V)
  >>> features = {"inputs": keras.ops.array([[5, 6, 7, 1]]),
  ...             "targets": keras.ops.array([[8, 9, 1]])}
  >>> tuple(model(features).shape)
  (1, 3, 100)
  >>> memory, source_mask = model.encode(features["inputs"])
  >>> cache = model.init_cache(memory, source_mask, max_length=10)
  >>> logits, cache = model.decode_step(keras.ops.array([0]), 0, cache)   # [1, 100]
  """

  def __init__(self, config: ModelConfig | dict, vocab_size: int, **kwargs):
    super().__init__(**kwargs)
    checks.check_positive_int("vocab_size", vocab_size)
    self.config = config = ModelConfig.of(config)
    self.vocab_size = vocab_size
    # One matrix for source, target and softmax (the paper), or T2T's separate ones; the logits
    # bias (imported models) belongs to the softmax.
    embedding = lambda name, logits_bias=False: SharedEmbedding(  # noqa: E731
        vocab_size, config.hidden_size, zero_pad=config.decoder_start == "zeros",
        scale=config.scale_embeddings, logits_bias=logits_bias, dtype=self.dtype_policy, name=name)
    self._target_embedding = self._softmax = None
    if config.shared_embedding_and_softmax_weights:
      self.embedding = embedding("shared_embedding", config.logits_bias)
    else:
      self.embedding = embedding("input_embedding")
      if not config.shared_embedding:
        self._target_embedding = embedding("target_embedding")
      self._softmax = embedding("softmax", config.logits_bias)
    if config.position_encoding in SINUSOIDS:
      frequencies, layout = SINUSOIDS[config.position_encoding]
      self.position = SinusoidalPositionEncoding(frequencies=frequencies, layout=layout,
                                                 dtype=self.dtype_policy, name="position")
    else:
      self.position = LearnedPositionEmbedding(config.max_position, dtype=self.dtype_policy,
                                               name="position")
    self.embedding_dropout = Dropout(config.layer_prepostprocess_dropout, dtype=self.dtype_policy)
    # T2T's symbol_dropout: source and target input tokens set to PAD in training.
    self.symbol_dropout = SymbolDropout(config.symbol_dropout, dtype=self.dtype_policy)
    self.encoder = Encoder(config, dtype=self.dtype_policy, name="encoder")
    self.decoder = Decoder(config, dtype=self.dtype_policy, name="decoder")

  def build(self, input_shape=None):
    """Creates every weight; shapes depend only on the constructor arguments."""
    hidden_shape = (None, None, self.config.hidden_size)
    for layer in {id(e): e for e in (self.embedding, self.target_embedding, self.softmax)}.values():
      layer.build()
    self.position.build(hidden_shape)
    self.encoder.build(hidden_shape)
    self.decoder.build(hidden_shape)

  # Embedding (paper sections 3.4, 3.5).

  @property
  def target_embedding(self):
    """The target side's `SharedEmbedding` (`self.embedding`, the source's, unless T2T's
    `shared_embedding_and_softmax_weights` and `shared_embedding` are both false)."""
    return self._target_embedding or self.embedding

  @property
  def softmax(self):
    """The `SharedEmbedding` whose table is the pre-softmax projection (`self.embedding` unless
    `shared_embedding_and_softmax_weights` is false). `softmax.embeddings` is [V, d]."""
    return self._softmax or self.embedding

  def _embed(self, ids, training, start_index=None, embedding=None):
    """ids [B, T] -> E[ids] * sqrt(d) + positions, with residual dropout -> [B, T, d]."""
    x = (embedding or self.embedding)(ids)
    x = x + self.position(x, start_index=start_index)
    return self.embedding_dropout(x, training=training)

  # Teacher forcing.

  def call(self, inputs, training=None):
    """{"inputs": [B, S], "targets": [B, T]} -> float32 logits [B, T, V] (teacher forcing)."""
    return self.softmax(self.decoder_output(inputs, training=training), reverse=True)

  def decoder_output(self, inputs, training=None):
    """The decoder's output before the pre-softmax projection, [B, T, d]: `call` without the
    projection, for a loss that fuses it (`t2t_lite.training.loss.projected_cross_entropy`)."""
    if not isinstance(inputs, dict) or not {"inputs", "targets"} <= set(inputs):
      raise ValueError("Transformer expects a dict {'inputs': int [batch, source_length], "
                       "'targets': int [batch, target_length]}; got "
                       f"{sorted(inputs) if isinstance(inputs, dict) else type(inputs).__name__}.")
    memory, source_mask = self.encode(inputs["inputs"], training=training)
    target_ids = self._check_ids("targets", inputs["targets"])
    return self._decode(target_ids, memory, source_mask, training, project=False)

  def _check_ids(self, name, ids):
    return checks.check_int_ids(name, ids, (2,), "[batch, length]")

  def encode(self, source_ids, training=False):
    """source ids [B, S] -> (encoder output [B, S, d], source mask [B, S] bool, True = token)."""
    source_ids = self.symbol_dropout(self._check_ids("source_ids", source_ids), training=training)
    source_mask = ops.not_equal(source_ids, PAD_ID)  # a dropped symbol is padding, as in T2T
    memory = self.encoder(self._embed(source_ids, training), padding_mask=source_mask,
                          training=training)
    return memory, source_mask

  def _shift_right(self, target_ids):
    """[B, T] targets -> decoder input [B, T]: START_ID, then targets[:, :-1]."""
    return ops.pad(target_ids[:, :-1], [(0, 0), (1, 0)], constant_values=START_ID)

  def _decode(self, target_ids, memory, source_mask, training, return_attention_scores=False,
              project=True):
    decoder_input = self._embed(self.symbol_dropout(self._shift_right(target_ids), training=training),
                                training, embedding=self.target_embedding)
    outputs = self.decoder(decoder_input, memory, memory_padding_mask=source_mask,
                           return_attention_scores=return_attention_scores, training=training)
    x, scores = outputs if return_attention_scores else (outputs, None)
    if project:
      x = self.softmax(x, reverse=True)  # float32 logits [B, T, V]
    return (x, scores) if return_attention_scores else x

  # Incremental decoding.

  def init_cache(self, encoder_output, source_mask, max_length, beam_size=None):
    """The decoding state; every leaf has batch as axis 0 (beam search tiles/gathers it).

    Returns:
      {"source_mask": bool [B, S],
       "decoder": {"layer_i": {"self": {"k": [B, H, max_length, d_k], "v": [B, H, max_length, d_v]},
                               "memory": {"k": [B, H, S, d_k], "v": [B, H, S, d_v]}}}}
      Self-attention k/v are preallocated zeros; the memory k/v are the encoder output's keys and
      values, projected once here. Its two parts can also be made apart (`split_cache`'s):
      `init_self_cache` and `memory_cache`.

    With `beam_size=g`, a cache that the g hypotheses of each sentence share (`decode_step` then
    takes B * g rows, sentence-major): nothing is tiled, the memory k/v and the source mask stay
    once per sentence, the self-attention k/v are [B, H, max_length * g, d] (row j of a sentence
    writes position p at index p * g + j), the keys, memory and self-attention, stored transposed
    ("kt": [B, H, d, S] and [B, H, d, max_length * g]; see `MultiHeadAttention`), and
    `"lineage"`: int32 [B * g, max_length], zeros, says for each hypothesis which row of its
    sentence wrote each position of its history. A
    beam search reorders only the lineage with the hypotheses
    (`translator.reorder_lineage`), never the keys/values.
    """
    return join_cache(self.init_self_cache(ops.shape(source_mask)[0], max_length, beam_size),
                      self.memory_cache(encoder_output, source_mask, beam_size))

  def init_self_cache(self, batch_size, max_length, beam_size=None):
    """`init_cache`'s part that decoding writes (`split_cache`'s growing part), zeros, made
    without an encoder output: {"layer_i": {"k", "v"}} per decoder layer, [B, H, max_length, d]
    (with `beam_size=g`: {"kt": [B, H, d, max_length * g], "v": [B, H, max_length * g, d]}, and
    "lineage" int32 [B * g, max_length]).
    `batch_size` may be a scalar tensor."""
    if not isinstance(max_length, int) or max_length < 1:
      raise ValueError(f"`max_length` must be a positive Python int (static cache size); got "
                       f"{max_length!r}.")
    if self.config.position_encoding == "learned" and max_length > self.config.max_position:
      raise ValueError(f"max_length {max_length} exceeds max_position {self.config.max_position} "
                       "of the learned position table; decode shorter outputs.")
    growing = self.decoder.init_self_cache(batch_size, max_length, beam_size)
    if beam_size is not None:
      growing["lineage"] = ops.zeros((batch_size * beam_size, max_length), "int32")
    return growing

  def memory_cache(self, encoder_output, source_mask, beam_size=None):
    """`init_cache`'s part fixed for a sentence (`split_cache`'s fixed part): {"source_mask":
    [B, S], "memory": {"layer_i": {"k", "v": [B, H, S, d]}}}, the encoder output's keys and
    values projected once per decoder layer; for a cache the beams share (`beam_size=g` > 1),
    the keys transposed, {"kt": [B, H, d, S], "v"}."""
    source_mask = checks.check_bool_mask("source_mask", source_mask, (2,), "[batch, source_length]")
    transposed = beam_size is not None and beam_size > 1
    return {"source_mask": source_mask,
            "memory": self.decoder.memory_cache(encoder_output, transposed_keys=transposed)}

  def output_projection(self):
    """The pre-softmax projection's table E [V, d] in the compute dtype
    (`SharedEmbedding.compute_table`; the logits are `x E^T`): a decoding loop computes it
    once and passes it to every `decode_step`."""
    return self.softmax.compute_table()

  def decode_step(self, token_ids, step, cache, training=False, output_projection=None,
                  shared_start=False):
    """One decoding step.

    Args:
      token_ids: int [B], the token at position `step` (the start id 0 at step 0).
      step: int32 scalar (may be traced), 0-based position of `token_ids`; or an int32 vector
        [B], each row's own position (rows at different steps in one batch: a search that
        refills a finished row with a new sentence at step 0 while the others go on; that
        row's `cache` entries must then be its new sentence's, see `init_cache`). The scalar
        path writes the cache with one slice; the vector path selects over the cache length.
      cache: from `init_cache` or the previous step. A cache shared by the hypotheses
        (`init_cache(..., beam_size=g)`) takes B * g `token_ids`; each writes its position
        `step` in its own slot and lineage (`lineage[row, step] = row % g`) and attends to the
        positions its lineage names.
      training: whether dropout is active.
      output_projection: optional `self.output_projection()`, computed once per search.
      shared_start: step 0 of a cache shared by groups of g hypotheses, run once per sentence
        (`step` must be 0): `token_ids` [B] for the cache's B sentences, not B * g (at step 0
        every hypothesis of a sentence is the start token, so all g of them would compute the
        same). Position 0 is written in slot 0 of each sentence's cache, which every lineage
        names at position 0 (they are zeros until a step writes them): the cache a beam search
        has after its first step, once every hypothesis continues hypothesis 0 (CTranslate2
        expands its beams after the first step too). Logits [B, V].

    Returns:
      (float32 logits [B, V] for the token at step + 1, the updated cache).
    """
    if shared_start:
      return self._shared_start_step(token_ids, step, cache, training, output_projection)
    token_ids = checks.check_int_ids("token_ids", token_ids, (1,), "[batch]")
    if not isinstance(cache, dict) or set(cache) - {"lineage"} != {"source_mask", "decoder"}:
      raise ValueError("`cache` must be the dict returned by init_cache (or by decode_step).")
    checks.check_step(step, token_ids.shape[0])
    step = ops.cast(step, "int32")
    x = self._embed(ops.expand_dims(token_ids, 1), training, start_index=step,
                    embedding=self.target_embedding)                              # [B, 1, d]
    lineage, self_mask = None, None
    groups = None
    if "lineage" in cache:
      entries = next(iter(cache["decoder"].values()))["self"]["v"].shape[2]       # L * g
      groups = entries // cache["lineage"].shape[1]
      lineage = write_lineage(cache["lineage"], step, groups)                     # [B * g, L]
      self_mask = lineage_mask(lineage, groups)                                   # [B, g, L * g]
    x, decoder_cache = self.decoder(x, memory_padding_mask=cache["source_mask"],
                                    cache=cache["decoder"], step=step, query_groups=groups,
                                    self_attention_mask=self_mask, training=training)
    logits = self.softmax(x, reverse=True, table=output_projection)[:, 0, :]        # [B, V]
    if self.config.never_predict_pad:  # a select, not an add: see FeedForward
      logits = ops.where(ops.arange(self.vocab_size) == PAD_ID, -1e9, logits)
    new_cache = {"source_mask": cache["source_mask"], "decoder": decoder_cache}
    if lineage is not None:
      new_cache["lineage"] = lineage
    return logits, new_cache

  def _shared_start_step(self, token_ids, step, cache, training, output_projection):
    """`decode_step(..., shared_start=True)`: step 0 on a two-position cache of its own, whose
    position-0 keys/values are then written at entry 0 (position 0, slot 0) of the shared cache."""
    if "lineage" not in cache:
      raise ValueError("shared_start=True is for a cache the hypotheses share (init_cache(..., "
                       "beam_size=g)); this cache has one row per hypothesis.")
    if not isinstance(step, int) or step != 0:
      raise ValueError(f"shared_start=True runs step 0 only (every hypothesis is then the start "
                       f"token); got step {step!r}.")
    growing, fixed = split_cache(cache)
    lineage = growing.pop("lineage")
    batch = ops.shape(token_ids)[0]
    # Two positions, not one (a softmax over one key is 1, and Keras warns of it): the causal
    # mask gives the second exactly zero weight.
    own = self.decoder.init_self_cache(batch, 2)                   # {"layer_i": {"k", "v"}}
    logits, first = self.decode_step(token_ids, 0, join_cache(own, fixed), training,
                                     output_projection)            # [B, V]
    first = split_cache(first)[0]
    written = {name: {"kt": ops.slice_update(layer["kt"], (0, 0, 0, 0),
                                             ops.swapaxes(first[name]["k"][:, :, :1], 2, 3)),
                      "v": ops.slice_update(layer["v"], (0, 0, 0, 0), first[name]["v"][:, :, :1])}
               for name, layer in growing.items()}                # [B, H, d, 1], [B, H, 1, d]
    return logits, join_cache({**written, "lineage": lineage}, fixed)

  # Attention pictures (paper figures 3-5).

  def attention_weights(self, source_ids, target_ids):
    """Teacher-forced attention weights, for the paper's attention visualizations.

    Returns:
      {"encoder_self": [...], "decoder_self": [...], "encoder_decoder": [...]}, lists with one
      float32 array [B, H, Tq, Tk] per layer.
    """
    source_ids = self._check_ids("source_ids", source_ids)
    target_ids = self._check_ids("target_ids", target_ids)
    source_mask = ops.not_equal(source_ids, PAD_ID)
    memory, encoder_scores = self.encoder(self._embed(source_ids, False), padding_mask=source_mask,
                                          return_attention_scores=True, training=False)
    _, decoder_scores = self._decode(target_ids, memory, source_mask, False,
                                     return_attention_scores=True)
    return {"encoder_self": encoder_scores, "decoder_self": decoder_scores["self"],
            "encoder_decoder": decoder_scores["encdec"]}

  def get_config(self):
    config = super().get_config()
    config.update({"config": self.config.to_dict(), "vocab_size": self.vocab_size})
    return config
