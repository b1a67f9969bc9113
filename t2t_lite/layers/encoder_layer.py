"""One encoder layer: self-attention and a feed-forward network (paper section 3.1)."""

import keras

from t2t_lite.layers import checks, masks
from t2t_lite.layers.sublayers import ConfiguredLayer


@keras.saving.register_keras_serializable(package="t2t_lite")
class EncoderLayer(ConfiguredLayer):
  """Self-attention then a position-wise FFN, each in a residual connection (paper section 3.1).

  `norm_type="post"` (the paper, T2T `transformer_base_v1`): `LayerNorm(x + Dropout(Sublayer(x)))`.
  `norm_type="pre"` (T2T's later sets): `x + Dropout(Sublayer(LayerNorm(x)))`; the `Encoder`
  stack then ends with a LayerNorm.

  Args:
    config: a `t2t_lite.hparams.ModelConfig` (or an HParams). This layer reads num_heads,
      filter_size, attention_key_channels / attention_value_channels (0: d_model), norm_type,
      layer_norm_epsilon, layer_prepostprocess_dropout (residual dropout on each sub-layer
      output), attention_dropout and relu_dropout (inside the FFN).
    **kwargs: standard `keras.layers.Layer` arguments.

  Call arguments:
    inputs: [B, S, d].
    padding_mask: optional bool [B, S], True for real tokens; padded keys are not attended to.
    return_attention_scores: also return the self-attention weights [B, H, S, S].
    training: whether dropout is active.

  Returns:
    [B, S, d], or `(outputs, weights)` with `return_attention_scores=True`.

  Example:
  >>> layer = EncoderLayer(ModelConfig(hidden_size=8, num_heads=2, filter_size=32))
  >>> x = keras.random.normal((2, 5, 8))
  >>> tuple(layer(x, padding_mask=keras.ops.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]) > 0).shape)
  (2, 5, 8)
  """

  def build(self, input_shape):
    self.self_attention = self.make_attention("self_attention", input_shape, self_attention=True)
    self.self_attention_norm = self.make_norm("self_attention_norm", input_shape)
    self.feed_forward = self.make_feed_forward(input_shape)
    self.feed_forward_norm = self.make_norm("feed_forward_norm", input_shape)
    self.residual_dropout = self.make_residual_dropout()

  def call(self, inputs, padding_mask=None, return_attention_scores=False, training=None):
    self.check_inputs(inputs)
    padding_mask = checks.check_bool_mask("padding_mask", padding_mask, (2,), "[batch, length]")
    attention_mask = masks.padding_to_attention_mask(padding_mask)  # [B, 1, S]
    scores = []

    def attend(x):
      output, weights = self.self_attention(x, attention_mask=attention_mask,
                                            return_attention_scores=True, training=training)
      scores.append(weights)
      return output

    x = self.residual(inputs, attend, self.self_attention_norm, training)
    x = self.residual(x, lambda y: self.feed_forward(y, training=training), self.feed_forward_norm,
                      training)
    return (x, scores[0]) if return_attention_scores else x
