"""Dropout (paper section 5.4, "Residual Dropout"), with a fast mask on TensorFlow.

Inverted dropout: in training each element is zeroed with probability `rate` and the survivors
are scaled by `1 / (1 - rate)`, so inference needs no rescaling.

Why not `keras.layers.Dropout`: on the TensorFlow backend it draws a float32 uniform per element
with TensorFlow's Philox kernel and then compares, scales and selects in separate passes, each a
trip through memory, which made dropout a large share of a training forward pass
(`python scripts/bench_train.py --dropout` times both; figures in docs/performance.md). Here, on
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

Under a `tf.distribute` strategy every replica calls the layer with the same generator state
(it is one mirrored variable), so Keras' Dropout draws the same mask on every replica: with 8
GPUs, all 8 slices of a batch would share one mask. Here, on TensorFlow with several replicas in
sync, the replica's index (`replica_id_in_sync_group`, which MultiWorkerMirroredStrategy counts
across workers: worker index * local replicas + local index) is hashed into the first word of
the key, `seed[0] ^ mix(replica)`. Replica 0 (and one device) keeps the plain key, since
mix(0) = 0; the masks stay reproducible from the seed.
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


def _numpy_mix(h):
  h = h ^ (h >> np.uint32(16))
  h = h * np.uint32(_MIX_MULTIPLIERS[0])
  h = h ^ (h >> np.uint32(15))
  h = h * np.uint32(_MIX_MULTIPLIERS[1])
  return h ^ (h >> np.uint32(16))


def numpy_keep_mask(shape, rate, seed, replica=0):
  """The keep mask the TensorFlow kernel draws on replica `replica`, in plain numpy (the
  reference for tests)."""
  key = np.asarray(seed).astype(np.int64).astype(np.uint32)
  key[0] ^= _numpy_mix(np.array([replica], np.uint32))[0]
  index = np.arange(int(np.prod(shape)), dtype=np.uint32).reshape(shape)
  return _numpy_mix(_numpy_mix(index ^ key[0]) ^ key[1]) >= np.uint32(_threshold(rate))


def _threshold(rate):
  return min(int(round(rate * 2.0 ** 32)), 2 ** 32 - 1)


def _tf_mix(h):
  """lowbias32 of a uint32 tensor."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  h = tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, tf.constant(16, tf.uint32)))
  h = h * tf.constant(_MIX_MULTIPLIERS[0], tf.uint32)
  h = tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, tf.constant(15, tf.uint32)))
  h = h * tf.constant(_MIX_MULTIPLIERS[1], tf.uint32)
  return tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, tf.constant(16, tf.uint32)))


def _several_replicas():
  """True inside `strategy.run` of a strategy with more than one replica in sync."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  context = tf.distribute.get_replica_context()
  return context is not None and context.num_replicas_in_sync > 1


def replica_seed(seed):
  """`seed` ([2] integer tensor) as int32, with the replica's index hashed into its first word
  when a `tf.distribute` strategy runs several replicas in sync (see the module docstring)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  seed = tf.cast(seed, tf.int32)
  if not _several_replicas():
    return seed
  replica_id = tf.distribute.get_replica_context().replica_id_in_sync_group
  replica = tf.bitcast(tf.cast(replica_id, tf.int32), tf.uint32)
  first = tf.bitwise.bitwise_xor(seed[0], tf.bitcast(_tf_mix(replica), tf.int32))
  return tf.stack([first, seed[1]])


@functools.cache
def _tf_kernel(rate):
  """XLA-compiled `(x, seed [2] int32) -> dropout(x)`, one function per rate."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from t2t_lite.graph_functions import graph_function  # pylint: disable=import-outside-toplevel
  mix = _tf_mix

  def kernel(x, seed):
    key = tf.bitcast(tf.cast(seed, tf.int32), tf.uint32)
    index = tf.cast(tf.reshape(tf.range(tf.size(x), dtype=tf.int32), tf.shape(x)), tf.uint32)
    keep = mix(tf.bitwise.bitwise_xor(mix(tf.bitwise.bitwise_xor(index, key[0])), key[1])) >= \
        tf.constant(_threshold(rate), tf.uint32)
    return tf.where(keep, x * tf.cast(1.0 / (1.0 - rate), x.dtype), tf.zeros_like(x))

  return graph_function(kernel, jit_compile=True, reduce_retracing=True)


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
    if keras.backend.backend() != "tensorflow":
      return keras.random.dropout(inputs, self.rate, seed=self.seed_generator)
    if hashed_masks.enabled and not too_big:
      return tf_dropout(inputs, self.rate, replica_seed(self.seed_generator.next()))
    if not _several_replicas():
      return keras.random.dropout(inputs, self.rate, seed=self.seed_generator)
    # Keras' own draw (the op keras.random.dropout runs), with the replica folded into the seed.
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return tf.nn.experimental.stateless_dropout(
        inputs, rate=self.rate, seed=replica_seed(self.seed_generator.next()))

  def compute_output_shape(self, input_shape):
    return input_shape

  def get_config(self):
    config = super().get_config()
    config.update({"rate": self.rate, "seed": self.seed})
    return config
