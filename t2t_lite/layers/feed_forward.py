"""Position-wise feed-forward network (paper section 3.3)."""

import keras
from keras import ops

from t2t_lite.layers import checks, projection
from t2t_lite.hparams.model_config import FFN_ACTIVATIONS as ACTIVATIONS
from t2t_lite.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="t2t_lite")
class FeedForward(keras.layers.Layer):
  """`FFN(x) = max(0, x W1 + b1) W2 + b2`, applied to every position alike (paper section 3.3).

  As T2T's `dense_relu_dense`: ReLU dropout (T2T's `relu_dropout`) between the two layers, biases
  on both, Glorot-uniform kernels. Both matmuls are 2-D over all `batch * length` positions.
  `activation="swish"` puts `x * sigmoid(x)` in place of the ReLU (Marian's models use it).

  Args:
    filter_size: d_ff, the inner width (2048 in the base model).
    output_channels: output width. Defaults to the input width (d_model).
    relu_dropout: dropout rate on the ReLU activations.
    activation: "relu" (the paper) or "swish".
    **kwargs: standard `keras.layers.Layer` arguments.

  Call arguments:
    inputs: float tensor [..., d].
    training: whether dropout is active.

  Returns:
    [..., output_channels].

  Example:
  >>> ffn = FeedForward(filter_size=32)
  >>> tuple(ffn(keras.random.normal((2, 5, 8))).shape)
  (2, 5, 8)
  """

  def __init__(self, filter_size: int, output_channels: int | None = None,
               relu_dropout: float = 0.0, activation: str = "relu", **kwargs):
    super().__init__(**kwargs)
    checks.check_positive_int("filter_size", filter_size)
    if output_channels is not None:
      checks.check_positive_int("output_channels", output_channels)
    checks.check_rate("relu_dropout", relu_dropout)
    if activation not in ACTIVATIONS:
      raise ValueError(f"`activation` must be one of {', '.join(ACTIVATIONS)}; got {activation!r}.")
    self.filter_size = filter_size
    self.output_channels = output_channels
    self.relu_dropout = relu_dropout
    self.activation = activation

  def build(self, input_shape):
    input_dim = input_shape[-1]
    if input_dim is None:
      raise ValueError(f"FeedForward needs a known last dimension; got shape {tuple(input_shape)}.")
    self._output_channels = self.output_channels or input_dim
    self.kernel_1 = self.add_weight(name="kernel_1", shape=(input_dim, self.filter_size),
                                    initializer="glorot_uniform")
    self.bias_1 = self.add_weight(name="bias_1", shape=(self.filter_size,), initializer="zeros")
    self.kernel_2 = self.add_weight(name="kernel_2", shape=(self.filter_size, self._output_channels),
                                    initializer="glorot_uniform")
    self.bias_2 = self.add_weight(name="bias_2", shape=(self._output_channels,),
                                  initializer="zeros")
    self.dropout = Dropout(self.relu_dropout, dtype=self.dtype_policy)

  def call(self, inputs, training=None):
    if len(inputs.shape) < 2:
      raise ValueError(f"FeedForward expects inputs [..., channels]; got shape {inputs.shape}.")
    dtype = self.compute_dtype
    leading_shape = tuple(checks.dim(inputs, axis) for axis in range(len(inputs.shape) - 1))
    x = ops.reshape(ops.cast(inputs, dtype), (-1, inputs.shape[-1]))  # [N, d]
    bias_1, bias_2 = ops.cast(self.bias_1, dtype), ops.cast(self.bias_2, dtype)
    hidden = projection.project(x, ops.cast(self.kernel_1, dtype))
    # One row at inference is a batch-1 decoding step. There XLA's CPU backend fuses a bias add
    # into the matrix-vector product and runs the fusion as a slower loop of its own
    # (`python scripts/bench_decode.py --gemv` times both forms). With no
    # add right after the product, the bias goes into the next elementwise fusion instead. Both
    # forms give the same floating-point values: max(h, -b) + b = relu(h + b), h - (-b) = h + b.
    # Elsewhere the usual form keeps TF's fused MatMul + BiasAdd + ReLU kernels.
    matrix_vector = x.shape[0] == 1 and not training
    if self.activation == "swish":
      hidden = ops.silu(hidden - ops.negative(bias_1) if matrix_vector else hidden + bias_1)
    elif matrix_vector:
      hidden = ops.maximum(hidden, ops.negative(bias_1)) + bias_1
    else:
      hidden = ops.relu(hidden + bias_1)
    hidden = self.dropout(hidden, training=training)  # [N, d_ff]
    outputs = projection.project(hidden, ops.cast(self.kernel_2, dtype))
    outputs = outputs - ops.negative(bias_2) if matrix_vector else outputs + bias_2
    return ops.reshape(outputs, leading_shape + (self._output_channels,))

  def compute_output_shape(self, input_shape):
    return tuple(input_shape[:-1]) + (self.output_channels or input_shape[-1],)

  def get_config(self):
    config = super().get_config()
    config.update({"filter_size": self.filter_size, "output_channels": self.output_channels,
                   "relu_dropout": self.relu_dropout, "activation": self.activation})
    return config
