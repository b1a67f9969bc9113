"""Sinusoidal positional encoding (paper section 3.5): T2T's (and Marian's) or the paper's formula."""

import math

import keras
from keras import ops

from t2t_lite.layers import checks

LAYOUTS = ("concat", "interleave")
FREQUENCIES = ("t2t", "paper")


def positions_for(inputs, start_index, positions):
  """The int32 positions of `inputs` [B, T, d]: explicit `positions` [T] or [B, T], else
  `start_index + arange(T)`: [T] for a scalar `start_index` (may be traced: the decoding step),
  [B, T] for an int vector [B] (one first position per row: slots decoding at their own step)."""
  checks.check_rank("inputs", inputs, (3,), "[batch, length, channels]")
  if positions is not None:
    if start_index is not None:
      raise ValueError("Pass either `start_index` or explicit `positions`, not both.")
    return ops.cast(checks.check_int_ids("positions", positions, (1, 2), "[length] or "
                                         "[batch, length]"), "int32")
  start_index = 0 if start_index is None else ops.cast(start_index, "int32")
  offsets = ops.arange(ops.shape(inputs)[1], dtype="int32")
  rank = len(getattr(start_index, "shape", ()))
  if rank == 1:  # per-row first positions [B]
    return ops.expand_dims(start_index, 1) + offsets                                    # [B, T]
  if rank:
    raise ValueError(f"`start_index` must be an int scalar or a vector [batch]; got shape "
                     f"{tuple(start_index.shape)}.")
  return offsets + start_index


@keras.saving.register_keras_serializable(package="t2t_lite")
class SinusoidalPositionEncoding(keras.layers.Layer):
  """Fixed sin/cos position signal, T2T's `get_timing_signal_1d` (paper section 3.5).

  With `n = d // 2` timescales, channel `i < n` of position `p` is `sin(p * inv_i)` and channel
  `n + i` is `cos(p * inv_i)` (an odd `d` gets one zero channel at the end), where

  - `frequencies="t2t"` (default): `inv_i = min_timescale * (min_timescale / max_timescale) **
    (i / (n - 1))`, T2T's spacing (its `min_timescale * exp(-i * log(max / min) / (n - 1))`,
    which multiplies the frequencies by min_timescale), whose slowest timescale is exactly
    `max_timescale` at the default min_timescale of 1. Marian's C++
    (`sinusoidalPositionEmbeddings`) computes the same numbers, so imported Marian weights were
    trained with these.
  - `frequencies="paper"`: `inv_i = min_timescale * (min_timescale / max_timescale) **
    (2i / d)`, the paper's `1 / 10000 ** (2i / d)`, whose slowest timescale is
    `10000 ** ((d - 2) / d)`. The two differ more the later the position (docs/model.md).

  Layout: the default `"concat"` puts all sines first, then all cosines, as T2T, Marian and
  Hugging Face's Marian models do, so weights trained by T2T (and T2T's attention pictures) line
  up channel for channel. The paper writes `PE(pos, 2i) = sin(.)`, `PE(pos, 2i+1) = cos(.)`:
  `layout="interleave"`. A layout is a fixed permutation of channels; since the encoding is
  only added to learned embeddings, a model trained with one is equivalent to one trained with
  the other, but weights trained with one need that one. The paper's exact formula is
  `frequencies="paper", layout="interleave"`.

  The layer returns the encoding (broadcast to the input's shape), to be added by the caller.

  Args:
    min_timescale: fastest wavelength / (2 pi) (1.0).
    max_timescale: slowest wavelength / (2 pi) (1.0e4).
    layout: "concat" (T2T, default) or "interleave" (the paper's channel order).
    frequencies: "t2t" (T2T and Marian, default) or "paper" (the paper's 10000 ** (2i / d)).
    **kwargs: standard `keras.layers.Layer` arguments.

  Call arguments:
    inputs: float tensor [B, T, d]; only its shape and dtype are used.
    start_index: optional int scalar (may be a traced tensor): position of the first step, for
      incremental decoding, or an int vector [B], each row's own first position. Defaults to 0.
    positions: optional explicit int positions [T] or [B, T] (instead of `start_index`).

  Returns:
    [B, T, d] in the layer's compute dtype.

  Example:
  >>> embedded = keras.random.normal((2, 7, 16))
  >>> x = embedded + SinusoidalPositionEncoding()(embedded)
  >>> step_pe = SinusoidalPositionEncoding()(embedded[:, :1], start_index=3)  # position 3
  """

  def __init__(self, min_timescale: float = 1.0, max_timescale: float = 1.0e4,
               layout: str = "concat", frequencies: str = "t2t", **kwargs):
    super().__init__(**kwargs)
    if layout not in LAYOUTS:
      raise ValueError(f"`layout` must be 'concat' (T2T) or 'interleave' (the paper); got {layout!r}.")
    if frequencies not in FREQUENCIES:
      raise ValueError(f"`frequencies` must be 't2t' (T2T, Marian) or 'paper'; got {frequencies!r}.")
    if not 0 < min_timescale <= max_timescale:
      raise ValueError("Need 0 < min_timescale <= max_timescale; got "
                       f"min_timescale={min_timescale}, max_timescale={max_timescale}.")
    self.min_timescale = float(min_timescale)
    self.max_timescale = float(max_timescale)
    self.layout = layout
    self.frequencies = frequencies

  def build(self, input_shape):
    if input_shape[-1] is None:
      raise ValueError(f"SinusoidalPositionEncoding needs a known channel count; got shape "
                       f"{tuple(input_shape)}.")
    self._channels = input_shape[-1]

  def call(self, inputs, start_index=None, positions=None):
    positions = ops.cast(positions_for(inputs, start_index, positions), "float32")
    num_timescales = self._channels // 2
    spacing = self._channels / 2 if self.frequencies == "paper" else max(num_timescales - 1, 1)
    log_increment = math.log(self.max_timescale / self.min_timescale) / spacing
    inv_timescales = self.min_timescale * ops.exp(
        ops.arange(num_timescales, dtype="float32") * -log_increment)  # [n]
    scaled_time = ops.expand_dims(positions, -1) * inv_timescales  # [..., T, n]
    sin, cos = ops.sin(scaled_time), ops.cos(scaled_time)
    if self.layout == "concat":
      signal = ops.concatenate([sin, cos], axis=-1)  # [..., T, 2n]
    else:
      signal = ops.reshape(ops.stack([sin, cos], axis=-1),
                           tuple(ops.shape(sin)[:-1]) + (2 * num_timescales,))
    if self._channels % 2:
      signal = ops.pad(signal, [(0, 0)] * (len(signal.shape) - 1) + [(0, 1)])
    return ops.broadcast_to(ops.cast(signal, self.compute_dtype), ops.shape(inputs))

  def compute_output_shape(self, input_shape):
    return input_shape

  def get_config(self):
    config = super().get_config()
    config.update({"min_timescale": self.min_timescale, "max_timescale": self.max_timescale,
                   "layout": self.layout, "frequencies": self.frequencies})
    return config
