"""What every encoder/decoder layer and stack is made of: a `ModelConfig`, the sub-layers built
from it, and the residual connection around each sub-layer (paper section 3.1).

Not layers to use by themselves; see `EncoderLayer`, `DecoderLayer`, `Encoder` and `Decoder`.
"""

import keras

from t2t_lite.hparams.model_config import ModelConfig
from t2t_lite.layers import checks
from t2t_lite.layers.dropout import Dropout
from t2t_lite.layers.feed_forward import FeedForward
from t2t_lite.layers.multi_head_attention import MultiHeadAttention


class ConfiguredLayer(keras.layers.Layer):
  """A layer built from a `ModelConfig` (`self.config`); makes its sub-layers.

  `config` may be a ModelConfig, an HParams (its architecture part is kept) or the dict that
  `get_config()` stores, so Keras' `from_config` needs nothing more.
  """

  def __init__(self, config: ModelConfig | dict, **kwargs):
    super().__init__(**kwargs)
    self.config = ModelConfig.of(config)

  def make_attention(self, name, input_shape, self_attention):
    config = self.config
    attention = MultiHeadAttention(
        config.num_heads, config.attention_key_channels or None,
        config.attention_value_channels or None, attention_dropout=config.attention_dropout,
        self_attention=self_attention, use_bias=config.attention_bias, dtype=self.dtype_policy,
        name=name)
    attention.build(input_shape, None if self_attention else input_shape)
    return attention

  def make_feed_forward(self, input_shape):
    feed_forward = FeedForward(self.config.filter_size, relu_dropout=self.config.relu_dropout,
                               activation=self.config.ffn_activation, dtype=self.dtype_policy,
                               name="feed_forward")
    feed_forward.build(input_shape)
    return feed_forward

  def make_norm(self, name, input_shape):
    norm = keras.layers.LayerNormalization(epsilon=self.config.layer_norm_epsilon,
                                           dtype=self.dtype_policy, name=name)
    norm.build(input_shape)
    return norm

  def make_residual_dropout(self):
    return Dropout(self.config.layer_prepostprocess_dropout, dtype=self.dtype_policy,
                   name="residual_dropout")

  def residual(self, x, sublayer, norm, training):
    """One sub-layer connection (paper section 3.1 and T2T's layer_prepostprocess), by norm_type:

    post: LayerNorm(x + Dropout(Sublayer(x)))   (the paper, `transformer_base_v1`)
    pre:  x + Dropout(Sublayer(LayerNorm(x)))   (T2T's later sets; the stack ends with a LayerNorm)
    """
    dropout = self.residual_dropout
    if self.config.norm_type == "pre":
      return x + dropout(sublayer(norm(x)), training=training)
    return norm(x + dropout(sublayer(x), training=training))

  def check_inputs(self, inputs):
    checks.check_rank("inputs", inputs, (3,), "[batch, length, hidden_size]")

  def get_config(self):
    config = super().get_config()
    config["config"] = self.config.to_dict()
    return config


class LayerStack(ConfiguredLayer):
  """N identical layers of `layer_class` in `self.layers`, then a LayerNorm for pre-norm.

  N is the config field `depth_field` (num_encoder_layers or num_decoder_layers).
  """

  layer_class = None
  depth_field = None

  @property
  def num_layers(self) -> int:
    return getattr(self.config, self.depth_field)

  def build(self, input_shape):
    self.layers = []
    for i in range(self.num_layers):
      layer = self.layer_class(self.config, dtype=self.dtype_policy, name=f"layer_{i}")
      layer.build(input_shape)
      self.layers.append(layer)
    if self.config.norm_type == "pre":  # T2T's later sets normalize the stack output
      self.final_norm = self.make_norm("final_norm", input_shape)

  def normalize_output(self, x):
    return self.final_norm(x) if self.config.norm_type == "pre" else x
