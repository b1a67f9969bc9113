"""Adafactor (Shazeer & Stern, 2018) with tensor2tensor's defaults: `optimizer=adafactor`.

T2T's `transformer_tpu` sets train with it (`adafactor_optimizer_from_hparams` of T2T's
utils/adafactor.py, at its default hparams); Keras' `Adafactor` computes the same update:

    beta_2(t) = 1 - t^-0.8                       (decay_type "pow", memory_exponent 0.8)
    R, C      = factored second moments of g^2 + 1e-30 (rows, columns of the last two axes)
    u         = g / sqrt(R C / mean(R))          (a 1-D variable keeps a full second moment)
    u        /= max(1, rms(u) / 1.0)             (clipping_threshold 1.0)
    w        -= lr * max(1e-3, rms(w)) * u       (multiply_by_parameter_scale; no momentum)

One difference: Keras uses min(lr, t^-0.5) where T2T uses lr. T2T's Adafactor schedules
(`rsqrt_decay`, `max(step, warmup)^-0.5`) never exceed t^-0.5, so they give the same steps.
The fused Q/K/V kernels here are one variable where T2T has three, so their factored
statistics (and parameter scale) are taken over the fused matrix.

Like `t2t_lite.training.adam.Adam`, it takes `aggregate_gradients=False` from a trainer that
has already summed the gradients over the replicas of a `tf.distribute` strategy.
"""

import keras

from t2t_lite.training.adam import OptionalAllReduce


@keras.saving.register_keras_serializable(package="t2t_lite")
class Adafactor(OptionalAllReduce, keras.optimizers.Adafactor):
  """`keras.optimizers.Adafactor` that can skip the all-reduce in `apply` (TensorFlow backend)."""


def adafactor(learning_rate, **kwargs) -> keras.optimizers.Optimizer:
  """Adafactor at T2T's defaults; `kwargs` as keras.optimizers.Adafactor's, plus
  `aggregate_gradients`."""
  return Adafactor(learning_rate=learning_rate, beta_2_decay=-0.8, epsilon_1=1e-30,
                   epsilon_2=1e-3, clip_threshold=1.0, relative_step=False, **kwargs)
