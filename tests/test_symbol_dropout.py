"""Symbol dropout (T2T's `symbol_dropout`): ids set to PAD in training, and the model treating a
dropped source token as padding, as T2T's `embedding_to_padding` does.

The model test rebuilds the forward pass from the layer's own draws (the seed generator's state
saved and restored) and checks the logits against it, and against the reading that would only
zero the dropped embeddings, which T2T does not do.
"""

import keras
import numpy as np
import pytest
from keras import ops

from t2t_lite.hparams import get_hparams
from t2t_lite.hparams.model_config import ModelConfig
from t2t_lite.layers import SymbolDropout
from t2t_lite.models.transformer import Transformer
from t2t_lite.token_ids import PAD_ID


def to_np(x):
  return ops.convert_to_numpy(x)


def ids_with_padding(shape=(8, 50), seed=0):
  rng = np.random.default_rng(seed)
  ids = rng.integers(2, 100, shape).astype("int32")
  ids[:, -7:] = PAD_ID  # a padded tail: stays PAD, is never counted as dropped
  return ids


@pytest.mark.backend_independent
def test_identity_at_inference_and_at_rate_zero():
  ids = ids_with_padding()
  layer = SymbolDropout(0.3, seed=1)
  np.testing.assert_array_equal(to_np(layer(ids)), ids)
  np.testing.assert_array_equal(to_np(layer(ids, training=False)), ids)
  np.testing.assert_array_equal(to_np(SymbolDropout(0.0)(ids, training=True)), ids)
  assert SymbolDropout(0.0).weights == []  # no seed generator: a model without it checkpoints as before


@pytest.mark.backend_independent
def test_drops_tokens_to_pad_at_the_rate_with_a_new_draw_each_call():
  ids = ids_with_padding((40, 57))
  layer = SymbolDropout(0.2, seed=3)
  out = to_np(layer(ids, training=True))
  assert out.dtype == ids.dtype and out.shape == ids.shape
  kept = out == ids
  assert np.all(out[~kept] == PAD_ID)            # a changed id is always PAD
  assert np.all(out[ids == PAD_ID] == PAD_ID)    # padding stays padding
  tokens = ids != PAD_ID
  # 2,000 tokens at p = 0.2: the standard deviation of the dropped share is 0.009.
  assert abs(np.mean(out[tokens] == PAD_ID) - 0.2) < 0.04
  again = to_np(layer(ids, training=True))
  assert not np.array_equal(out, again)          # each call (a step, the source and the target) draws anew
  assert 0.6 < np.mean((out == PAD_ID)[tokens] == (again == PAD_ID)[tokens]) < 0.75  # independent: 0.68


@pytest.mark.backend_independent
def test_config_round_trip_and_bad_rate():
  layer = SymbolDropout(0.1, seed=7, name="symbols")
  clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
  assert type(clone) is SymbolDropout and clone.get_config() == layer.get_config()
  for rate in (1.0, -0.1):
    with pytest.raises(ValueError, match="dropout rate in"):
      SymbolDropout(rate)
  with pytest.raises(ValueError, match="symbol_dropout"):
    get_hparams("transformer_tiny", "symbol_dropout=1.5")


def test_tf_in_a_compiled_function_with_unknown_shapes():
  if keras.backend.backend() != "tensorflow":
    pytest.skip("tf.function")
  import tensorflow as tf
  layer = SymbolDropout(0.5, seed=2)
  fn = tf.function(lambda ids: layer(ids, training=True), jit_compile=True,
                   input_signature=[tf.TensorSpec([None, None], tf.int32)])
  ids = ids_with_padding((6, 30))
  first, second = fn(ids).numpy(), fn(ids).numpy()
  assert not np.array_equal(first, second)
  for out in (first, second):
    assert np.all((out == ids) | (out == PAD_ID)) and 0.3 < np.mean(out[ids != PAD_ID] == PAD_ID) < 0.7


def test_t2t_hparam_name_now_sets_the_field():
  hparams = get_hparams("transformer_base", "symbol_dropout=0.1")
  assert hparams.symbol_dropout == 0.1
  assert ModelConfig.of(hparams).symbol_dropout == 0.1


@pytest.mark.backend_independent
def test_model_drops_source_and_target_symbols_and_hides_dropped_source_from_attention():
  config = ModelConfig(hidden_size=32, filter_size=64, num_heads=4, num_encoder_layers=2,
                       num_decoder_layers=2, layer_prepostprocess_dropout=0.0,
                       attention_dropout=0.0, relu_dropout=0.0, symbol_dropout=0.3)
  keras.utils.set_random_seed(0)
  model = Transformer(config, vocab_size=100)
  features = {"inputs": ids_with_padding((4, 12), seed=1), "targets": ids_with_padding((4, 10), seed=2)}
  model(features)  # build

  # The draws the model will make: the source first (encode), then the shifted targets.
  state = to_np(model.symbol_dropout.seed_generator.state).copy()
  source = model.symbol_dropout(features["inputs"], training=True)
  decoder_input = model.symbol_dropout(model._shift_right(features["targets"]), training=True)
  model.symbol_dropout.seed_generator.state.assign(state)
  logits = to_np(model(features, training=True))
  assert np.any(to_np(source) != features["inputs"]) and np.any(
      to_np(decoder_input) != to_np(model._shift_right(features["targets"])))

  def forward(source_ids, source_mask, target_input=decoder_input):
    memory = model.encoder(model._embed(source_ids, False), padding_mask=source_mask, training=False)
    x = model.decoder(model._embed(target_input, False, embedding=model.target_embedding), memory,
                      memory_padding_mask=source_mask, training=False)
    return to_np(model.softmax(x, reverse=True))

  # T2T: a dropped source symbol is padding (its zero embedding is masked out of attention).
  np.testing.assert_allclose(logits, forward(source, ops.not_equal(source, PAD_ID)), atol=1e-5)
  # Only zeroing the dropped embeddings, attention still seeing them, is another model.
  only_zeroed = forward(source, ops.not_equal(features["inputs"], PAD_ID))
  assert np.max(np.abs(logits - only_zeroed)) > 1e-3
  # At inference nothing is dropped.
  np.testing.assert_allclose(to_np(model(features, training=False)),
                             forward(features["inputs"], ops.not_equal(features["inputs"], PAD_ID),
                                     model._shift_right(features["targets"])), atol=1e-5)
