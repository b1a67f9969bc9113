"""T2T's weight_decay (hparams): the loss gains weight_decay * sum(||w||^2 / 2) over every weight
but the biases (T2T's `optimize.weight_decay`: 1-D variables named like a bias; here also layer
norms' beta), so the gradient an update applies gains weight_decay * w. Checked against the same
update without it (same seed, batch and dropout masks): the difference of the two gradients the
optimizer receives is weight_decay times the weights, and exactly 0 for the biases; under
mixed_float16's loss scaling, the decay and clip_grad_norm's clipping of the unscaled gradient."""

import numpy as np
import pytest

from t2t_lite import model_dir
from t2t_lite.hparams import get_hparams
from t2t_lite.training import keras_fit, train_loop

from trainer_testing import record_applied_gradients

DECAY = 0.01
MICRO = ("hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1,batch_size=256,"
         "max_length=16,eval_bleu_examples=0,learning_rate_warmup_steps=4")


def first_update(tmp_path, weight_decay, overrides="", loss_scale=None):
  """(weights before, gradients the optimizer received) of one update, by variable path inside
  the model (a second model's own name is uniquified: transformer_1/...). `loss_scale`: with
  mixed_float16, the loss scale of the update (the gradients received are scaled by it)."""
  hparams = get_hparams("transformer_tiny", MICRO + overrides).replace(weight_decay=weight_decay)
  trainer = train_loop.Trainer(hparams, 32, str(tmp_path / f"run{weight_decay}{overrides}"))
  if loss_scale is not None:
    trainer.optimizer.dynamic_scale.assign(loss_scale)
  variables = trainer.model.trainable_variables
  paths = [v.path.split("/", 1)[1] for v in variables]
  rng = np.random.default_rng(0)
  for v in variables:  # biases and betas start at 0: nonzero, so that decaying them would show
    v.assign(v + rng.normal(0, 0.1, v.shape).astype(v.dtype))
  before = {p: v.numpy() for p, v in zip(paths, variables)}
  received = record_applied_gradients(trainer)
  trainer.train_step({"inputs": rng.integers(2, 30, (4, 7)).astype("int32"),
                      "targets": rng.integers(2, 30, (4, 9)).astype("int32")})
  return before, {p: r.numpy() for p, r in zip(paths, received)}


def test_the_gradient_gains_weight_decay_times_the_weights_biases_aside(tmp_path):
  weights, plain = first_update(tmp_path, 0.0)
  weights_decayed, decayed = first_update(tmp_path, DECAY)
  assert weights.keys() == weights_decayed.keys() == plain.keys() == decayed.keys()
  exempt = set()
  for path, w in weights.items():
    np.testing.assert_array_equal(w, weights_decayed[path])  # the same start
    assert np.all(w != 0), path
    difference = decayed[path] - plain[path]
    if np.all(difference == 0):
      exempt.add(path)
    else:
      np.testing.assert_allclose(difference, DECAY * w, rtol=1e-3, atol=1e-7, err_msg=path)
  # T2T's rule by name: the feed-forward biases and the layer norms' beta, nothing else.
  expected = {p for p in weights if p.split("/")[-1].startswith("bias") or p.endswith("/beta")}
  assert expected and exempt == expected
  assert any(p.endswith("/gamma") for p in set(weights) - exempt)  # layer-norm scales decay
  assert any(p.endswith("embeddings") for p in set(weights) - exempt)


def test_under_loss_scaling_the_decay_and_the_clipping_are_those_of_the_unscaled_gradient(tmp_path):
  """mixed_float16: the optimizer receives gradients times the loss scale (it divides them
  again), so the decay term added to them must be scaled too (weight_decay x scale x w, else it
  is weight_decay / scale in effect), and clip_grad_norm must compare the unscaled norm (else
  every update is clipped to clip / scale)."""
  scale, mixed = 64.0, ",mixed_precision=mixed_float16"
  try:
    weights, plain = first_update(tmp_path, 0.0, mixed, scale)
    _, decayed = first_update(tmp_path, DECAY, mixed, scale)
    kernel = next(p for p in weights if p.endswith("kernel"))
    for path in (kernel, "shared_embedding/embeddings"):
      np.testing.assert_allclose((decayed[path] - plain[path]) / scale, DECAY * weights[path],
                                 rtol=1e-3, atol=1e-6, err_msg=path)
    norm = np.sqrt(sum(np.sum(np.square(g / scale)) for g in plain.values()))
    clip = norm / 4  # the update's gradient has 4x this norm: it is clipped to it
    _, clipped = first_update(tmp_path, 0.0, f"{mixed},clip_grad_norm={clip}", scale)
    clipped_norm = np.sqrt(sum(np.sum(np.square(g / scale)) for g in clipped.values()))
    assert clipped_norm == pytest.approx(clip, rel=1e-3)
    for path, g in plain.items():
      np.testing.assert_allclose(clipped[path], g / 4, rtol=1e-3, atol=1e-6 * scale, err_msg=path)
  finally:
    model_dir.set_precision_policy(get_hparams("transformer_tiny", "mixed_precision=float32"))


def test_weight_decay_is_checked_and_named_as_in_t2t():
  assert get_hparams("transformer_base", "weight_decay=1e-6").weight_decay == 1e-6
  with pytest.raises(ValueError, match="weight_decay must be >= 0"):
    get_hparams("transformer_base", "weight_decay=-1e-6")


def test_keras_fit_refuses_weight_decay_with_a_way_out():
  with pytest.raises(ValueError, match="weight_decay=0.0001.*t2t-lite-trainer"):
    keras_fit.build_optimizer(get_hparams("transformer_tiny", "weight_decay=1e-4"))
