"""R-Drop (hparam rdrop_alpha; Liang et al., 2021, "R-Drop: Regularized Dropout for Neural
Networks"): each micro-batch's pairs go through the model twice, and the loss per token is
CE_1 + CE_2 + alpha / 2 * (KL(p_1 || p_2) + KL(p_2 || p_1)), averaged over both copies' tokens.

The loss (the KL term fused into the projected cross entropy, its gradient in the same buffer)
is checked against numpy and against autodiff of the terms written out; the trainer's whole
gradient against one written out independently (the doubled batch through the model with the
same dropout masks, explicit logits, the plain keras.ops cross entropy and each KL direction on
its own), in a graph and under XLA; with every dropout at 0 both copies agree, so R-Drop's
update is plain training's."""

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.hparams import get_hparams
from t2t_lite.token_ids import PAD_ID
from t2t_lite.training import keras_fit, train_loop
from t2t_lite.training.loss import projected_cross_entropy, smoothed_cross_entropy

from trainer_testing import record_applied_gradients

MICRO = ("hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1,batch_size=256,"
         "max_length=16,eval_bleu_examples=0,learning_rate_warmup_steps=4")


def numpy_log_softmax(x):
  x = x.astype(np.float64)
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.mark.parametrize("compact", [True, False])
@pytest.mark.parametrize("with_bias", [False, True])
def test_the_projected_loss_adds_the_kl_of_the_two_halves_and_its_gradient(compact, with_bias):
  rng = np.random.default_rng(1)
  half, length, depth, vocab, alpha, eps = 3, 6, 8, 50, 5.0, 0.1
  output = tf.constant(rng.normal(0, 1, (2 * half, length, depth)).astype("float32"))
  table = tf.Variable(rng.normal(0, 1, (vocab, depth)).astype("float32"))
  bias = tf.Variable(rng.normal(0, 1, (vocab,)).astype("float32")) if with_bias else None
  targets = rng.integers(2, vocab, (half, length)).astype("int32")
  targets[0, 4:] = PAD_ID
  targets[2, 1:] = PAD_ID
  doubled = tf.constant(np.concatenate([targets, targets]))
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(output)
    loss, count, nll = projected_cross_entropy(output, table, doubled, eps, compact=compact,
                                               row_multiple=4, bias=bias, rdrop_alpha=alpha)
    # The reference: explicit logits, the keras.ops cross entropy, each KL direction on its own.
    logits = tf.matmul(output, table, transpose_b=True) + (0.0 if bias is None else bias)
    ce, ref_count, ref_nll = smoothed_cross_entropy(logits, doubled, eps)
    log_p = tf.nn.log_softmax(logits)
    first, second = log_p[:half], log_p[half:]
    kl = (tf.reduce_sum(tf.exp(first) * (first - second), -1)
          + tf.reduce_sum(tf.exp(second) * (second - first), -1))
    reference = ce + alpha / 2 * tf.reduce_sum(kl * tf.cast(targets != PAD_ID, tf.float32))
  assert float(count) == float(ref_count) == 2 * np.sum(targets != PAD_ID)
  assert float(nll) == pytest.approx(float(ref_nll), rel=1e-5)
  assert float(loss) == pytest.approx(float(reference), rel=1e-5)
  logp_a, logp_b = numpy_log_softmax(logits.numpy()[:half]), numpy_log_softmax(logits.numpy()[half:])
  numpy_kl = ((np.exp(logp_a) - np.exp(logp_b)) * (logp_a - logp_b)).sum(-1)[targets != PAD_ID].sum()
  assert float(reference - ce) == pytest.approx(alpha / 2 * numpy_kl, rel=1e-4)
  sources = [output, table] + ([] if bias is None else [bias])
  for got, expected in zip(tape.gradient(loss, sources), tape.gradient(reference, sources)):
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-4, atol=1e-5)


def one_update(tmp_path, overrides, reference_alphas=()):
  """(gradients the optimizer received, [reference gradients for each of reference_alphas]) of
  a trainer's first update. The reference: the same weights and dropout masks, the doubled
  batch through the model, explicit logits, smoothed_cross_entropy and each KL direction
  written out, divided by the doubled batch's tokens."""
  hparams = get_hparams("transformer_tiny", MICRO + "," + overrides)
  trainer = train_loop.Trainer(hparams, 32, str(tmp_path / overrides.replace(",", "_").replace("=", "")))
  variables = trainer.model.trainable_variables
  seeds = [v for v in trainer.model.variables if v.name == "seed_generator_state"]
  assert bool(seeds) == (trainer.hparams.layer_prepostprocess_dropout > 0)
  before = [v.numpy() for v in variables]
  seeds_before = [v.numpy() for v in seeds]
  received = record_applied_gradients(trainer)
  rng = np.random.default_rng(0)
  targets = rng.integers(2, 30, (4, 9)).astype("int32")
  targets[1, 6:] = PAD_ID
  batch = {"inputs": rng.integers(2, 30, (4, 7)).astype("int32"), "targets": targets}
  _, tokens = trainer.train_step(batch)
  assert float(tokens) == np.sum(targets != PAD_ID)  # the data's tokens, once (tokens/s)
  got = [r.numpy() for r in received]
  return got, [reference(trainer, batch, variables, seeds, before, seeds_before, alpha)
               for alpha in reference_alphas]


def reference(trainer, batch, variables, seeds, before, seeds_before, alpha):
  targets = batch["targets"]
  for v, value in zip(variables, before):
    v.assign(value)
  for v, value in zip(seeds, seeds_before):
    v.assign(value)
  doubled = {key: tf.concat([t, t], axis=0) for key, t in batch.items()}
  with tf.GradientTape() as tape:
    output = trainer.model.decoder_output(doubled, training=True)
    logits = tf.matmul(output, trainer.model.softmax.embeddings, transpose_b=True)
    ce_sum, tokens, _ = smoothed_cross_entropy(logits, doubled["targets"],
                                               trainer.hparams.label_smoothing)
    log_p = tf.nn.log_softmax(logits)
    first, second = log_p[:4], log_p[4:]
    kl_12 = tf.reduce_sum(tf.exp(first) * (first - second), -1)
    kl_21 = tf.reduce_sum(tf.exp(second) * (second - first), -1)
    real = tf.cast(tf.not_equal(targets, PAD_ID), tf.float32)
    kl_sum = tf.reduce_sum((kl_12 + kl_21) * real)
    loss = (ce_sum + alpha / 2 * kl_sum) / tokens
  assert float(tokens) == 2 * float(np.sum(targets != PAD_ID))
  return [g.numpy() for g in tape.gradient(loss, variables)]


@pytest.mark.parametrize("xla", [False, True])
def test_the_update_is_the_gradient_of_both_cross_entropies_and_the_kl(tmp_path, xla):
  alpha = 5.0
  got, (expected, cross_entropy_only) = one_update(
      tmp_path, f"rdrop_alpha={alpha},xla_compile={str(xla).lower()}", reference_alphas=(alpha, 0.0))
  for g, e in zip(got, expected):
    np.testing.assert_allclose(g, e, atol=2e-4 * max(np.abs(e).max(), 1e-6), rtol=2e-3)
  moved = sum(not np.allclose(e, c, atol=1e-6) for e, c in zip(expected, cross_entropy_only))
  assert moved > 0  # the KL term changes the gradient (dropout masks differ between the copies)


def test_without_dropout_both_copies_agree_and_the_update_is_plain_training(tmp_path):
  zero = "layer_prepostprocess_dropout=0.0,attention_dropout=0.0,relu_dropout=0.0"
  plain, _ = one_update(tmp_path, zero)
  rdrop, _ = one_update(tmp_path, zero + ",rdrop_alpha=5.0")
  for p, r in zip(plain, rdrop):
    np.testing.assert_allclose(r, p, atol=1e-6, rtol=1e-4)


def test_rdrop_alpha_is_checked_and_keras_fit_refuses_it_with_a_way_out():
  assert get_hparams("transformer_tiny", "rdrop_alpha=5").rdrop_alpha == 5.0
  with pytest.raises(ValueError, match="rdrop_alpha must be >= 0"):
    get_hparams("transformer_tiny", "rdrop_alpha=-1")
  with pytest.raises(ValueError, match="rdrop_alpha=5.0.*t2t-lite-trainer"):
    keras_fit.build_optimizer(get_hparams("transformer_tiny", "rdrop_alpha=5"))
