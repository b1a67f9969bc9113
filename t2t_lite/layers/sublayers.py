"""Bases of the encoder/decoder layers and stacks: the settings they share and their sublayers.

Not layers to use by themselves; see `EncoderLayer`, `DecoderLayer`, `Encoder` and `Decoder`.
"""

import keras

from t2t_lite.layers import checks
from t2t_lite.layers.dropout import Dropout
from t2t_lite.layers.feed_forward import FeedForward
from t2t_lite.layers.multi_head_attention import MultiHeadAttention

# The settings every encoder/decoder layer and stack takes (and the Transformer passes on).
NORM_TYPES = ("pre", "post")
BLOCK_SETTINGS = ("num_heads", "filter_size", "key_channels", "value_channels", "norm_type",
                  "layer_norm_epsilon", "dropout", "attention_dropout", "relu_dropout")


def residual(x, sublayer, norm, dropout, norm_type, training):
  """One sub-layer connection (paper section 3.1 and T2T's layer_prepostprocess).

  post: LayerNorm(x + Dropout(Sublayer(x)))   (the paper, `transformer_base_v1`)
  pre:  x + Dropout(Sublayer(LayerNorm(x)))   (T2T's later sets; the stack ends with a LayerNorm)
  """
  if norm_type == "pre":
    return x + dropout(sublayer(norm(x)), training=training)
  return norm(x + dropout(sublayer(x), training=training))


class BlockLayer(keras.layers.Layer):
  """Stores and checks the shared settings; makes the sublayers of a layer."""

  def __init__(self, num_heads, filter_size, key_channels=None, value_channels=None,
               norm_type="pre", layer_norm_epsilon=1e-6, dropout=0.1, attention_dropout=0.0,
               relu_dropout=0.0, **kwargs):
    super().__init__(**kwargs)
    checks.check_positive_int("num_heads", num_heads)
    checks.check_positive_int("filter_size", filter_size)
    if norm_type not in NORM_TYPES:
      raise ValueError(f"`norm_type` must be 'pre' (T2T's later sets) or 'post' (the paper); "
                       f"got {norm_type!r}.")
    for name, rate in (("dropout", dropout), ("attention_dropout", attention_dropout),
                       ("relu_dropout", relu_dropout)):
      checks.check_rate(name, rate)
    if not layer_norm_epsilon > 0:
      raise ValueError(f"`layer_norm_epsilon` must be > 0 (T2T: 1e-6); got {layer_norm_epsilon!r}.")
    self.num_heads = num_heads
    self.filter_size = filter_size
    self.key_channels = key_channels
    self.value_channels = value_channels
    self.norm_type = norm_type
    self.layer_norm_epsilon = layer_norm_epsilon
    self.dropout = dropout
    self.attention_dropout = attention_dropout
    self.relu_dropout = relu_dropout

  def block_config(self):
    """The shared settings, as keyword arguments for a sub-block."""
    return {name: getattr(self, name) for name in BLOCK_SETTINGS}

  def make_attention(self, name, input_shape, self_attention):
    attention = MultiHeadAttention(
        self.num_heads, self.key_channels, self.value_channels,
        attention_dropout=self.attention_dropout, self_attention=self_attention,
        dtype=self.dtype_policy, name=name)
    attention.build(input_shape, None if self_attention else input_shape)
    return attention

  def make_feed_forward(self, input_shape):
    feed_forward = FeedForward(self.filter_size, relu_dropout=self.relu_dropout,
                               dtype=self.dtype_policy, name="feed_forward")
    feed_forward.build(input_shape)
    return feed_forward

  def make_norm(self, name, input_shape):
    norm = keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon,
                                           dtype=self.dtype_policy, name=name)
    norm.build(input_shape)
    return norm

  def make_residual_dropout(self):
    return Dropout(self.dropout, dtype=self.dtype_policy, name="residual_dropout")

  def check_inputs(self, inputs):
    checks.check_rank("inputs", inputs, (3,), "[batch, length, hidden_size]")

  def get_config(self):
    config = super().get_config()
    config.update(self.block_config())
    return config


class StackLayer(BlockLayer):
  """N identical layers of `layer_class` in `self.blocks`, then a LayerNorm for pre-norm."""

  layer_class = None

  def __init__(self, num_layers, num_heads, filter_size, **kwargs):
    super().__init__(num_heads, filter_size, **kwargs)
    checks.check_positive_int("num_layers", num_layers)
    self.num_layers = num_layers

  def build(self, input_shape):
    self.blocks = []
    for i in range(self.num_layers):
      block = self.layer_class(**self.block_config(), dtype=self.dtype_policy, name=f"layer_{i}")
      block.build(input_shape)
      self.blocks.append(block)
    if self.norm_type == "pre":  # T2T's later sets normalize the stack output
      self.final_norm = self.make_norm("final_norm", input_shape)

  def normalize_output(self, x):
    return self.final_norm(x) if self.norm_type == "pre" else x

  def get_config(self):
    config = super().get_config()
    config["num_layers"] = self.num_layers
    return config
