"""Adam (paper section 5.3) with the per-variable update fused into one XLA kernel on TensorFlow.

`keras.optimizers.Adam` on the TensorFlow backend updates each variable with about a dozen
separate element-wise ops (subtract, multiply, square, assign-add, sqrt, divide, assign-sub...),
each a pass over the variable's memory. `Adam` here computes the same formulas,

    m <- m + (g - m) (1 - beta_1)
    v <- v + (g^2 - v) (1 - beta_2)
    w <- w - alpha m / (sqrt(v) + epsilon),  alpha = lr sqrt(1 - beta_2^t) / (1 - beta_1^t)

in one XLA-compiled loop that reads g, m, v, w once and writes m, v, w once. It is a subclass of
`keras.optimizers.Adam` with the same arguments, variables and checkpoint layout, so checkpoints
written by either restore into the other. Sparse gradients (`tf.IndexedSlices`), amsgrad and
other backends (JAX, where XLA fuses Keras' update anyway) take Keras' own `update_step`.
`python scripts/bench_train.py --adam` times both on the model's variables.

Under a `tf.distribute` strategy Keras' optimizer sums the gradients over replicas inside
`apply`, after clipping them (each replica by its own norm). A trainer that sums, clips and
checks the gradients itself passes `aggregate_gradients=False` (tf.keras' old
`experimental_aggregate_gradients=False`): `apply` then takes gradients that are already the
sum over replicas and updates each replica's copy of a variable with its own copy of it.
"""

import functools

import keras


@functools.cache
def _tf_kernel():
  """XLA-compiled `(g, m, v, w, alpha, beta_1, beta_2, epsilon) -> (m', v', w')`."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from t2t_lite.graph_functions import graph_function  # pylint: disable=import-outside-toplevel

  def kernel(gradient, m, v, w, alpha, beta_1, beta_2, epsilon):
    m = m + (gradient - m) * (1 - beta_1)
    v = v + (tf.square(gradient) - v) * (1 - beta_2)
    return m, v, w - m * alpha / (tf.sqrt(v) + epsilon)

  return graph_function(kernel, jit_compile=True, reduce_retracing=True)


class OptionalAllReduce:
  """Mixin for a Keras optimizer: `aggregate_gradients=False` skips the all-reduce Keras does in
  `apply` under a `tf.distribute` strategy (TensorFlow backend), for callers whose gradients are
  already summed over the replicas."""

  def __init__(self, *args, aggregate_gradients: bool = True, **kwargs):
    super().__init__(*args, **kwargs)
    self.aggregate_gradients = aggregate_gradients

  def get_config(self):
    return {**super().get_config(), "aggregate_gradients": self.aggregate_gradients}

  def _all_reduce_sum_gradients(self, grads_and_vars):
    if self.aggregate_gradients:
      return super()._all_reduce_sum_gradients(grads_and_vars)
    return list(grads_and_vars)


@keras.saving.register_keras_serializable(package="t2t_lite")
class Adam(OptionalAllReduce, keras.optimizers.Adam):
  """`keras.optimizers.Adam` whose dense update is one fused XLA kernel on TensorFlow.

  Same arguments as `keras.optimizers.Adam` (the paper: beta_1=0.9, beta_2=0.98, epsilon=1e-9),
  plus `aggregate_gradients`: False when the caller passes gradients already summed over the
  replicas of a `tf.distribute` strategy (no all-reduce in `apply`).
  """

  def update_step(self, gradient, variable, learning_rate):
    if keras.backend.backend() != "tensorflow" or self.amsgrad:
      return super().update_step(gradient, variable, learning_rate)
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    if isinstance(gradient, tf.IndexedSlices):
      return super().update_step(gradient, variable, learning_rate)
    dtype = variable.dtype
    index = self._get_variable_index(variable)
    m, v = self._momentums[index], self._velocities[index]
    step = tf.cast(self.iterations + 1, dtype)
    beta_1 = tf.cast(self.beta_1, dtype)
    beta_2 = tf.cast(self.beta_2, dtype)
    alpha = (tf.cast(learning_rate, dtype) * tf.sqrt(1 - tf.pow(beta_2, step))
             / (1 - tf.pow(beta_1, step)))
    new_m, new_v, new_w = _tf_kernel()(
        tf.cast(gradient, dtype), tf.convert_to_tensor(m), tf.convert_to_tensor(v),
        tf.convert_to_tensor(variable), alpha, beta_1, beta_2, tf.cast(self.epsilon, dtype))
    self.assign(m, new_m)
    self.assign(v, new_v)
    self.assign(variable, new_w)
