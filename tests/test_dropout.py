"""Dropout: Keras' semantics on every backend; on TensorFlow, the hashed mask against numpy.

The TensorFlow kernel replaces Keras' Philox draw with a counter-based hash (t2t_lite/layers/
dropout.py), so besides matching its numpy reference bit for bit it must behave like random
bits: the keep rate, independence between neighbours and between successive calls.
"""

import keras
import numpy as np
import pytest
from keras import ops

from layer_testing import run_layer_test
from t2t_lite.layers import Dropout
from t2t_lite.layers.dropout import numpy_keep_mask


def to_np(x):
  return ops.convert_to_numpy(x)


@pytest.mark.backend_independent
def test_dropout_layer_contract():
  run_layer_test(Dropout, dict(rate=0.3, seed=7), inputs=(np.ones((2, 5, 8), "float32"),),
                 expected_output_shape=(2, 5, 8), expected_num_trainable_weights=0)


@pytest.mark.backend_independent
def test_dropout_is_identity_at_inference_and_scales_survivors_in_training():
  x = np.random.RandomState(0).uniform(1, 2, size=(4, 50, 30)).astype("float32")
  layer = Dropout(0.25, seed=3)
  np.testing.assert_array_equal(to_np(layer(x)), x)
  np.testing.assert_array_equal(to_np(layer(x, training=False)), x)
  y = to_np(layer(x, training=True))
  kept = y != 0
  np.testing.assert_allclose(y[kept], x[kept] / 0.75, rtol=1e-6)
  # 6,000 draws at p = 0.75: the standard deviation of the mean is 0.0056.
  assert abs(kept.mean() - 0.75) < 0.03
  assert not np.array_equal(y, to_np(layer(x, training=True)))  # a new mask every call
  np.testing.assert_array_equal(to_np(Dropout(0.0)(x, training=True)), x)


@pytest.mark.backend_independent
def test_dropout_config_round_trip_and_bad_rate():
  layer = Dropout(0.3, seed=7, name="drop")
  clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
  assert type(clone) is Dropout and clone.get_config() == layer.get_config()
  for rate in (1.0, -0.1, "0.1"):
    with pytest.raises(ValueError, match="dropout rate in"):
      Dropout(rate)


# ---- TensorFlow kernel ------------------------------------------------------------------------

def tf_only():
  if keras.backend.backend() != "tensorflow":
    pytest.skip("the hashed kernel is TensorFlow's")
  import tensorflow as tf
  return tf


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_tf_mask_equals_numpy_reference_and_gradient_applies_the_same_mask(rate):
  tf = tf_only()
  from t2t_lite.layers.dropout import tf_dropout
  x = tf.constant(np.random.RandomState(1).normal(size=(3, 7, 11)).astype("float32"))
  upstream = tf.constant(np.random.RandomState(2).normal(size=(3, 7, 11)).astype("float32"))
  seed = tf.constant([12345, -7], tf.int32)  # negative words are reinterpreted as uint32
  expected_keep = numpy_keep_mask(x.shape, rate, [12345, -7])
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = tf_dropout(x, rate, seed)
    weighted = tf.reduce_sum(y * upstream)
  np.testing.assert_array_equal(y.numpy() != 0, expected_keep)
  np.testing.assert_allclose(y.numpy(), np.where(expected_keep, x.numpy() / (1 - rate), 0), rtol=1e-6)
  grad = tape.gradient(weighted, x).numpy()
  np.testing.assert_allclose(grad, np.where(expected_keep, upstream.numpy() / (1 - rate), 0.0), rtol=1e-6)


def test_tf_mask_bits_look_random():
  """Keep rate, neighbour independence and independence across successive seeds."""
  rate, n = 0.1, 1_000_000
  a = numpy_keep_mask((n,), rate, [99, 0])
  b = numpy_keep_mask((n,), rate, [99, 1])  # the next call of the same layer
  c = numpy_keep_mask((n,), rate, [100, 0])  # another layer's generator
  sigma = np.sqrt(0.9 * 0.1 / n)
  for mask in (a, b, c):
    assert abs(mask.mean() - 0.9) < 5 * sigma
    # P(keep i and keep i+1) = 0.81 if independent; the product's sigma is ~3.9e-4.
    assert abs((mask[1:] & mask[:-1]).mean() - 0.81) < 0.002
    assert abs((mask[1::2] & mask[::2]).mean() - 0.81) < 0.003
  for x, y in ((a, b), (a, c), (b, c)):
    assert abs((x & y).mean() - 0.81) < 0.002


def test_tf_layer_in_a_traced_function_with_unknown_shapes_and_float16():
  tf = tf_only()
  layer = Dropout(0.5, seed=1, dtype="mixed_float16")

  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float16)])
  def drop(x):
    return layer(x, training=True)

  for shape in ((3, 5), (8, 2)):
    x = tf.ones(shape, tf.float16)
    y = drop(x).numpy()
    assert y.dtype == np.float16
    assert set(np.unique(y)) <= {0.0, 2.0}
  first, second = drop(tf.ones((64, 64), tf.float16)).numpy(), drop(tf.ones((64, 64), tf.float16)).numpy()
  assert not np.array_equal(first, second)


def test_tf_layer_draws_the_hashed_mask_unless_switched_to_keras():
  """The layer's TensorFlow mask is the hashed one (the seed generator's state is its key);
  inside `hashed_masks(False)` it is Keras' own (`keras.random.dropout`, same seed state)."""
  tf = tf_only()
  from t2t_lite.layers.dropout import hashed_masks
  x = tf.ones((16, 32))

  def mask_and_key(layer):
    key = to_np(layer.seed_generator.state)
    return to_np(layer(x, training=True)) != 0, key

  mask, key = mask_and_key(Dropout(0.5, seed=5))
  np.testing.assert_array_equal(mask, numpy_keep_mask(x.shape, 0.5, key))
  with hashed_masks(False):
    switched, key = mask_and_key(Dropout(0.5, seed=5))
    keras_mask = to_np(keras.random.dropout(x, 0.5, seed=keras.random.SeedGenerator(5))) != 0
  assert hashed_masks.enabled
  assert not np.array_equal(switched, numpy_keep_mask(x.shape, 0.5, key))
  np.testing.assert_array_equal(switched, keras_mask)
