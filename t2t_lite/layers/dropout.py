"""Dropout (paper section 5.4, "Residual Dropout"), with a fast mask on TensorFlow.

Inverted dropout: in training each element is zeroed with probability `rate` and the survivors
are scaled by `1 / (1 - rate)`, so inference needs no rescaling.

Why not `keras.layers.Dropout`: on the TensorFlow backend it draws a float32 uniform per element
with TensorFlow's Philox kernel and then compares, scales and selects in separate passes, each a
trip through memory, which made dropout a large share of a training forward pass
(`python scripts/bench_train.py --dropout` times both; figures in the README, "Speed"). Here, on
TensorFlow, the keep decision is a counter-based hash, `hash(index, seed) >= rate * 2^32`,
computed inside one XLA-fused loop with the scaling, and the gradient recomputes the same mask
from the seed instead of storing it. The hash is two rounds of
Wellons' `lowbias32` integer mixer keyed by the two words of the Keras seed
(`hash = mix(mix(index ^ seed[0]) ^ seed[1])`): not cryptographic, and dropout needs no more than
uniform, mutually independent-looking bits (tests check the keep rate, pairwise independence and
the dependence on the seed). On other backends (JAX), and for the calls traced inside
`with hashed_masks(False):`, the layer is `keras.random.dropout`.

The seed comes from the layer's own `keras.random.SeedGenerator`, as in `keras.layers.Dropout`:
each call in training advances it, so every step draws a new mask.
"""

import functools

import keras
import numpy as np

from t2t_lite.layers import checks
from t2t_lite.layers.tracing_switch import TracingSwitch

# lowbias32 (C. Wellons, "Prospecting for hash functions", 2018): bias 0.17 of the ideal avalanche.
_MIX_MULTIPLIERS = (0x7FEB352D, 0x846CA68B)
_MAX_ELEMENTS = 2 ** 31  # element indices are int32
# On by default; `python scripts/bench_train.py --dropout` times a forward pass both ways.
hashed_masks = TracingSwitch("Dropout's hashed mask on TensorFlow (off: keras.random.dropout)")


def numpy_keep_mask(shape, rate, seed):
  """The keep mask the TensorFlow kernel draws, in plain numpy (the reference for tests)."""
  def mix(h):
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(_MIX_MULTIPLIERS[0])
    h = h ^ (h >> np.uint32(15))
    h = h * np.uint32(_MIX_MULTIPLIERS[1])
    return h ^ (h >> np.uint32(16))
  key = np.asarray(seed).astype(np.int64).astype(np.uint32)
  index = np.arange(int(np.prod(shape)), dtype=np.uint32).reshape(shape)
  return mix(mix(index ^ key[0]) ^ key[1]) >= np.uint32(_threshold(rate))


def _threshold(rate):
  return min(int(round(rate * 2.0 ** 32)), 2 ** 32 - 1)


@functools.cache
def _tf_kernel(rate):
  """XLA-compiled `(x, seed [2] int32) -> dropout(x)`, one function per rate."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel

  def mix(h):
    h = tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, tf.constant(16, tf.uint32)))
    h = h * tf.constant(_MIX_MULTIPLIERS[0], tf.uint32)
    h = tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, tf.constant(15, tf.uint32)))
    h = h * tf.constant(_MIX_MULTIPLIERS[1], tf.uint32)
    return tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, tf.constant(16, tf.uint32)))

  def kernel(x, seed):
    key = tf.bitcast(tf.cast(seed, tf.int32), tf.uint32)
    index = tf.cast(tf.reshape(tf.range(tf.size(x), dtype=tf.int32), tf.shape(x)), tf.uint32)
    keep = mix(tf.bitwise.bitwise_xor(mix(tf.bitwise.bitwise_xor(index, key[0])), key[1])) >= \
        tf.constant(_threshold(rate), tf.uint32)
    return tf.where(keep, x * tf.cast(1.0 / (1.0 - rate), x.dtype), tf.zeros_like(x))

  return tf.function(kernel, jit_compile=True, reduce_retracing=True)


def tf_dropout(x, rate, seed):
  """Dropout of a TensorFlow tensor with the hashed mask; differentiable in `x` (the gradient
  is the same masked scaling, the mask recomputed from `seed`)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  kernel = _tf_kernel(float(rate))

  @tf.custom_gradient
  def drop(x):
    return kernel(x, seed), lambda dy: kernel(dy, seed)

  return drop(x)


@keras.saving.register_keras_serializable(package="t2t_lite")
class Dropout(keras.layers.Layer):
  """Inverted dropout; drop-in for `keras.layers.Dropout(rate)` (no noise_shape).

  Args:
    rate: probability of zeroing an element, in [0, 1).
    seed: optional int seed of the layer's seed generator.

  Call args:
    inputs: any float tensor.
    training: dropout is applied only when true.
  """

  def __init__(self, rate: float, seed: int | None = None, **kwargs):
    super().__init__(**kwargs)
    checks.check_rate("rate", rate)
    self.rate = rate
    self.seed = seed
    self.seed_generator = keras.random.SeedGenerator(seed) if rate > 0 else None
    self.supports_masking = True
    self.built = True

  def call(self, inputs, training=False):
    if not training or self.rate == 0:
      return inputs
    # Element indices are int32: a tensor known to hold 2^31 elements or more (8 GiB in float32)
    # takes Keras' path.
    too_big = None not in inputs.shape and int(np.prod(inputs.shape)) >= _MAX_ELEMENTS
    if keras.backend.backend() == "tensorflow" and hashed_masks.enabled and not too_big:
      return tf_dropout(inputs, self.rate, self.seed_generator.next())
    return keras.random.dropout(inputs, self.rate, seed=self.seed_generator)

  def compute_output_shape(self, input_shape):
    return input_shape

  def get_config(self):
    config = super().get_config()
    config.update({"rate": self.rate, "seed": self.seed})
    return config
