"""The encoder stack (paper section 3.1)."""

import keras

from t2t_lite.layers.encoder_layer import EncoderLayer
from t2t_lite.layers.sublayers import LayerStack


@keras.saving.register_keras_serializable(package="t2t_lite")
class Encoder(LayerStack):
  """N identical `EncoderLayer`s (paper section 3.1: N = 6), in `self.layers`, plus a final
  LayerNorm when `norm_type="pre"` (T2T's later sets normalize the stack output; post-norm layers
  already end normalized).

  The input is the embedded source with positions added and dropped out (done by the model).

  Args:
    config: a `t2t_lite.hparams.ModelConfig`: N is its `num_encoder_layers`; each layer reads
      it as `EncoderLayer` does.
    **kwargs: standard `keras.layers.Layer` arguments.

  Call arguments:
    inputs: [B, S, d].
    padding_mask: optional bool [B, S], True for real tokens.
    return_attention_scores: also return a list (one per layer) of weights [B, H, S, S].
    training: whether dropout is active.

  Returns:
    [B, S, d], or `(outputs, list_of_weights)` with `return_attention_scores=True`.

  Example:
  >>> encoder = Encoder(ModelConfig(hidden_size=8, num_heads=2, filter_size=32,
  ...                               num_encoder_layers=2))
  >>> tuple(encoder(keras.random.normal((2, 5, 8))).shape)
  (2, 5, 8)
  """

  layer_class = EncoderLayer
  depth_field = "num_encoder_layers"

  def call(self, inputs, padding_mask=None, return_attention_scores=False, training=None):
    self.check_inputs(inputs)
    x, scores = inputs, []
    for layer in self.layers:
      x, weights = layer(x, padding_mask=padding_mask, return_attention_scores=True,
                         training=training)
      scores.append(weights)
    x = self.normalize_output(x)
    return (x, scores) if return_attention_scores else x
