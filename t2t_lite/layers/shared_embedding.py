"""Shared source/target embedding and pre-softmax projection (paper section 3.4)."""

import keras
from keras import ops

from t2t_lite.layers import checks
from t2t_lite.token_ids import PAD_ID


def times_transposed(x, table):
  """`x @ table^T` for x [N, d] and table [V, d] -> [N, V], as one product contracting both
  axes 1 (`SharedEmbedding.compute_table`). TensorFlow: a `MatMul` with `transpose_b`, which
  XLA compiles to that product; `tf.einsum` (Keras' `ops.einsum`) emits a transpose and a
  MatMul, which XLA folds at 64 rows but at 1 row turns into a table copy per decoding step.
  """
  if keras.backend.backend() == "tensorflow":
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return tf.matmul(x, table, transpose_b=True)
  return ops.einsum("nd,vd->nv", x, table)


@keras.saving.register_keras_serializable(package="t2t_lite")
class SharedEmbedding(keras.layers.Layer):
  """One matrix E [vocab_size, d] for the source embedding, the target embedding and the
  pre-softmax projection (paper section 3.4; T2T's `shared_embedding_and_softmax_weights`).

  - `call(ids)`: `E[ids] * sqrt(d)` (the paper multiplies embeddings by sqrt(d_model)).
    With `zero_pad=True` (default) the embedding of id 0 (PAD) is zeroed, as T2T's symbol
    modality does for inputs and targets; the start symbol of the shifted targets is id 0 too,
    so it embeds to zeros exactly like T2T's `shift_right_3d`. Row 0 is still used (and trained)
    by the softmax.
  - `call(x, reverse=True)`: logits `x @ E^T`, returned in float32 even under mixed precision;
    `table=self.compute_table()` passes the table a decoding loop computed once, multiplied
    without a transpose. With `logits_bias=True`, a trained [V] bias `b` is added: `x @ E^T + b`
    (Marian's output layer).

  E is initialized normal(0, d ** -0.5), as T2T does.

  Args:
    vocab_size: V, the shared source/target vocabulary size.
    hidden_size: d_model.
    zero_pad: zero the embedding of id 0 (T2T's behaviour).
    scale: multiply embeddings by sqrt(hidden_size) (the paper; False for models trained without).
    logits_bias: add a trained bias `logits_bias` [V] to the logits.
    **kwargs: standard `keras.layers.Layer` arguments.

  Call arguments:
    inputs: int ids [...], or with `reverse=True` float activations [..., d].
    reverse: False to embed ids, True to project activations to vocabulary logits.

  Returns:
    [..., d] embeddings in the compute dtype, or [..., V] float32 logits.

  Example:
  >>> embedding = SharedEmbedding(vocab_size=100, hidden_size=16)
  >>> x = embedding(keras.ops.array([[5, 6, 1, 0]]))       # [1, 4, 16]
  >>> logits = embedding(x, reverse=True)                  # [1, 4, 100] float32
  """

  def __init__(self, vocab_size: int, hidden_size: int, zero_pad: bool = True, scale: bool = True,
               logits_bias: bool = False, **kwargs):
    super().__init__(**kwargs)
    checks.check_positive_int("vocab_size", vocab_size)
    checks.check_positive_int("hidden_size", hidden_size)
    self.vocab_size = vocab_size
    self.hidden_size = hidden_size
    self.zero_pad = bool(zero_pad)
    self.scale = bool(scale)
    self.use_logits_bias = bool(logits_bias)

  def build(self, input_shape=None):
    self.embeddings = self.add_weight(
        name="embeddings", shape=(self.vocab_size, self.hidden_size),
        initializer=keras.initializers.RandomNormal(stddev=self.hidden_size ** -0.5))
    if self.use_logits_bias:
      self.logits_bias = self.add_weight(name="logits_bias", shape=(self.vocab_size,),
                                         initializer="zeros")

  def compute_table(self):
    """E [V, d] in the compute dtype, for `call(x, reverse=True, table=...)`: what a decoding
    loop computes once (a cast under mixed precision, nothing in float32) and projects with at
    every step, as a product contracting E's axis 1 (`x E^T` without a transposed copy).

    Under XLA on CPU that product is as fast as `x` times a transposed table E^T computed once
    (base, 64 and 256 rows), and the search copies no table: a transposed table passed to the
    compiled loop was copied once before the loop and once more for each later cache phase (each
    copy 65 MB on `transformer_base`, 2-4% of a batch-64 greedy search). Transposing inside the
    loop is no answer: at batch 1 XLA then turns the product into a loop fusion that copies the
    table every step (docs/performance.md).
    """
    return ops.cast(self.embeddings, self.compute_dtype)

  def call(self, inputs, reverse=False, table=None):
    if reverse:
      if inputs.shape[-1] != self.hidden_size:
        raise ValueError(f"SharedEmbedding(reverse=True) expects activations [..., "
                         f"{self.hidden_size}]; got shape {inputs.shape}.")
      leading_shape = ops.shape(inputs)[:-1]
      x = ops.reshape(ops.cast(inputs, self.compute_dtype), (-1, self.hidden_size))
      if table is not None:  # [N, d] x [V, d] -> [N, V], contracting d: no transposed copy
        logits = times_transposed(x, ops.cast(table, self.compute_dtype))
      else:  # graph mode folds ops.transpose into the matmul, a compiled loop does not
        logits = ops.matmul(x, ops.transpose(self.compute_table()))               # [N, V]
      logits = ops.cast(logits, "float32")
      if self.use_logits_bias:  # subtracted negated: an add straight after a matrix-vector
        # product is a slower XLA fusion on CPU (see FeedForward); the values are the same.
        logits = logits - ops.negative(ops.cast(self.logits_bias, "float32"))
      return ops.reshape(logits, tuple(leading_shape) + (self.vocab_size,))
    ids = checks.check_int_ids("inputs", inputs, range(8), "[...] of token ids")
    table = self.compute_table()
    embedded = ops.take(table, ids, axis=0)
    if self.scale:
      embedded = embedded * ops.cast(self.hidden_size ** 0.5, table.dtype)
    if self.zero_pad:
      embedded = embedded * ops.cast(ops.expand_dims(ops.not_equal(ids, PAD_ID), -1), table.dtype)
    return embedded

  def get_config(self):
    config = super().get_config()
    config.update({"vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
                   "zero_pad": self.zero_pad, "scale": self.scale,
                   "logits_bias": self.use_logits_bias})
    return config
