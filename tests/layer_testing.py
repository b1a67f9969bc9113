"""`run_layer_test`: the Keras layer contract every layer test starts from (keras-hub's helper).

    run_layer_test(FeedForward, {"filter_size": 32}, inputs=(x,),
                   expected_output_shape=(2, 5, 8), expected_num_trainable_weights=4)

checks, in order: the config round trip (serialized, deserialized, same config, same outputs
once the weights are copied), build and an eager call (output shapes and dtype, weight count),
a symbolic call on `keras.KerasTensor`s (the same output shapes, found without running), one
training step of `model.fit` that moves every trainable weight it reaches and gives a finite
loss, and mixed precision (float16 compute, float32 variables). It runs on either backend.
"""

import keras
import numpy as np
from keras import ops


def to_numpy(x):
  return ops.convert_to_numpy(x)


def shapes(structure):
  return keras.tree.map_structure(lambda x: tuple(x.shape), structure)


def _is_array(x):
  return isinstance(x, np.ndarray) or hasattr(x, "shape") and hasattr(x, "dtype")


def _symbolic(x):
  return keras.KerasTensor(x.shape, dtype=keras.backend.standardize_dtype(x.dtype)) \
      if _is_array(x) else x


def run_layer_test(cls, init_kwargs, inputs, expected_output_shape, call_kwargs=None,
                   expected_num_trainable_weights=None, run_training_check=True,
                   mixed_precision_output_dtype="float16"):
  """Runs the contract checks on `cls(**init_kwargs)(*inputs, **call_kwargs)`; returns the layer
  of the eager call (built, float32) for the behaviour checks that follow.

  Args:
    cls: the layer class.
    init_kwargs: its constructor arguments.
    inputs: tuple of positional call arguments (numpy arrays).
    expected_output_shape: the output's shape, or a structure of shapes matching the output.
    call_kwargs: keyword call arguments (arrays, or plain values such as `reverse=True`).
    expected_num_trainable_weights: checked after the build when given.
    run_training_check: fit one step (layers without trainable weights skip it).
    mixed_precision_output_dtype: the first output's dtype under "mixed_float16" (None: skip
      the mixed precision check); float32 where a layer returns float32 by design (logits).
  """
  call_kwargs = call_kwargs or {}

  # Config round trip: serialize -> deserialize gives the same layer and, with the same weights,
  # the same outputs.
  layer = cls(**init_kwargs)
  expected = layer(*inputs, **call_kwargs)
  config = layer.get_config()
  clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
  assert type(clone) is cls
  assert clone.get_config() == config
  assert cls.from_config(config).get_config() == config
  clone(*inputs, **call_kwargs)
  clone.set_weights(layer.get_weights())
  actual = clone(*inputs, **call_kwargs)
  for a, e in zip(keras.tree.flatten(actual), keras.tree.flatten(expected)):
    np.testing.assert_allclose(to_numpy(a), to_numpy(e), atol=1e-6)

  # Build and eager call.
  assert layer.built
  assert shapes(expected) == expected_output_shape, (shapes(expected), expected_output_shape)
  first = keras.tree.flatten(expected)[0]
  assert keras.backend.standardize_dtype(first.dtype) == "float32"
  if expected_num_trainable_weights is not None:
    assert len(layer.trainable_weights) == expected_num_trainable_weights, \
        [w.path for w in layer.trainable_weights]

  # Symbolic call: the output shapes without running the layer.
  symbolic = cls(**init_kwargs)(*map(_symbolic, inputs),
                                **{k: _symbolic(v) for k, v in call_kwargs.items()})
  assert shapes(symbolic) == expected_output_shape, (shapes(symbolic), expected_output_shape)

  if run_training_check:
    _check_training_step(cls(**init_kwargs), inputs, call_kwargs)

  if mixed_precision_output_dtype:
    mixed = cls(**init_kwargs, dtype="mixed_float16")
    mixed(*inputs, **call_kwargs)
    mixed.set_weights(layer.get_weights())
    output = keras.tree.flatten(mixed(*inputs, **call_kwargs))[0]
    assert keras.backend.standardize_dtype(output.dtype) == mixed_precision_output_dtype
    assert all(keras.backend.standardize_dtype(w.dtype) == "float32" for w in mixed.weights)
    np.testing.assert_allclose(to_numpy(output).astype("float32"), to_numpy(first), rtol=0.02,
                               atol=0.02)
  return layer


class LayerModel(keras.Model):
  """The layer as a model of its array arguments (a dict), giving its first output."""

  def __init__(self, layer, fixed_kwargs):
    super().__init__()
    self.layer = layer
    self.fixed_kwargs = fixed_kwargs

  def call(self, arrays, training=None):
    positional = [arrays[f"arg_{i}"] for i in range(sum(k.startswith("arg_") for k in arrays))]
    kwargs = {k: v for k, v in arrays.items() if not k.startswith("arg_")}
    output = self.layer(*positional, **kwargs, **self.fixed_kwargs, training=training)
    return keras.tree.flatten(output)[0]


def _check_training_step(layer, inputs, call_kwargs):
  """Fits one step; the data are the positional inputs and the keyword arrays with their batch
  size, other keyword arguments (a [Tq, Tk] mask, `reverse=True`) are passed as they are."""
  batch = len(inputs[0])
  arrays = {f"arg_{i}": x for i, x in enumerate(inputs)}
  batched = lambda v: _is_array(v) and len(v.shape) and v.shape[0] == batch
  arrays.update({k: v for k, v in call_kwargs.items() if batched(v)})
  model = LayerModel(layer, {k: v for k, v in call_kwargs.items() if not batched(v)})
  # A random target: with zeros, the mean square of a LayerNorm output is constant.
  target = np.random.default_rng(0).normal(size=tuple(model(arrays).shape)).astype("float32")
  if not layer.trainable_weights:
    return
  before = [to_numpy(w).copy() for w in layer.trainable_weights]
  model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
  history = model.fit(arrays, target, batch_size=batch, epochs=1, verbose=0)
  assert np.isfinite(history.history["loss"][0])
  moved = [not np.array_equal(b, to_numpy(w)) for b, w in zip(before, layer.trainable_weights)]
  assert all(moved), [w.path for w, m in zip(layer.trainable_weights, moved) if not m]
