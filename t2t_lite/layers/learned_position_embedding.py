"""Learned positional embedding (paper section 3.5 and Table 3 row E)."""

import keras
from keras import ops

from t2t_lite.layers import checks
from t2t_lite.layers.sinusoidal_position_encoding import positions_for


@keras.saving.register_keras_serializable(package="t2t_lite")
class LearnedPositionEmbedding(keras.layers.Layer):
  """A trained table of `max_position` position vectors (Table 3 row E: "positional embedding
  instead of sinusoids"; T2T's `add_positional_embedding`, initialized normal(0, d ** -0.5)).

  Like `SinusoidalPositionEncoding` it returns the embedding (broadcast to the input's shape), to
  be added by the caller, and takes the same `start_index` / `positions` for decoding.

  Args:
    max_position: number of rows; positions must be in [0, max_position).
    **kwargs: standard `keras.layers.Layer` arguments.

  Call arguments:
    inputs: float tensor [B, T, d]; only its shape and dtype are used.
    start_index: optional int scalar (may be traced): position of the first step, or an int
      vector [B], each row's own first position. Defaults to 0.
    positions: optional explicit int positions [T] or [B, T].

  Returns:
    [B, T, d] in the layer's compute dtype.

  Example:
  >>> embedded = keras.random.normal((2, 7, 16))
  >>> x = embedded + LearnedPositionEmbedding(max_position=64)(embedded)
  """

  def __init__(self, max_position: int, **kwargs):
    super().__init__(**kwargs)
    checks.check_positive_int("max_position", max_position)
    self.max_position = max_position

  def build(self, input_shape):
    channels = input_shape[-1]
    if channels is None:
      raise ValueError(f"LearnedPositionEmbedding needs a known channel count; got shape "
                       f"{tuple(input_shape)}.")
    self.embeddings = self.add_weight(
        name="embeddings", shape=(self.max_position, channels),
        initializer=keras.initializers.RandomNormal(stddev=channels ** -0.5))

  def call(self, inputs, start_index=None, positions=None):
    length = inputs.shape[1]
    first = 0 if start_index is None else start_index
    if positions is None and isinstance(first, int) and length is not None and (
        first + length > self.max_position):
      raise ValueError(f"Positions {first}..{first + length - 1} exceed max_position "
                       f"({self.max_position}); build the layer with a larger max_position or "
                       "use shorter sequences.")
    positions = positions_for(inputs, start_index, positions)
    table = ops.cast(self.embeddings, self.compute_dtype)
    return ops.broadcast_to(ops.take(table, positions, axis=0), ops.shape(inputs))

  def compute_output_shape(self, input_shape):
    return input_shape

  def get_config(self):
    config = super().get_config()
    config.update({"max_position": self.max_position})
    return config
