"""Symbol dropout: whole input tokens replaced by PAD in training (T2T's `symbol_dropout`).

Not in the paper (section 5.4 drops activations, not tokens). tensor2tensor's hparam
`symbol_dropout` (common_hparams, default 0) sets each input symbol of the source and of the
target to 0, PAD, with probability `rate` before the embedding lookup (`SymbolModality.bottom`,
`dropout_no_scaling` on the ids), in training only. PAD embeds to zeros there, and the encoder
takes its padding from the embedded source (`embedding_to_padding`: an all-zero vector is
padding), so a dropped source token is also hidden from every attention over the source; a
dropped target token is a decoder input of zeros, like the start symbol. The loss still predicts
the original targets. Word dropout of this kind regularizes models trained on little data
(Sennrich, Haddow and Birch, WMT 2016, dropped whole source and target words at 0.1-0.2).

This layer does the id part: `ids` [..] int -> the same ids with each non-PAD id replaced by PAD
with probability `rate` (no rescaling: ids are not activations). The model derives its source
mask from the result, as T2T does.
"""

import keras
from keras import ops

from t2t_lite.layers.dropout import Dropout, replica_seed
from t2t_lite.token_ids import PAD_ID


@keras.saving.register_keras_serializable(package="t2t_lite")
class SymbolDropout(Dropout):
  """Replaces each id by PAD with probability `rate` in training; `Dropout`'s arguments (rate,
  seed) and seed generator, applied to token ids: `ids` int tensor (any shape), `training`.

  Each call in training advances the layer's seed generator, so every step (and each of a step's
  calls, source and target) draws new symbols. Under a `tf.distribute` strategy with several
  replicas, each replica draws its own (`t2t_lite.layers.dropout.replica_seed`).
  """

  def call(self, ids, training=False):
    if not training or self.rate == 0:
      return ids
    if keras.backend.backend() == "tensorflow":
      import tensorflow as tf  # pylint: disable=import-outside-toplevel
      uniform = tf.random.stateless_uniform(tf.shape(ids),
                                            seed=replica_seed(self.seed_generator.next()))
    else:
      uniform = keras.random.uniform(ops.shape(ids), seed=self.seed_generator)
    return ops.where(uniform < self.rate, ops.cast(PAD_ID, ids.dtype), ids)
