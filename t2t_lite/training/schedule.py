"""Learning-rate schedules (paper section 5.3) in T2T's form: a product of named factors.

The paper: `lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)` ("noam"). T2T
(utils/learning_rate.py) multiplies the factors named in `learning_rate_schedule`:

    constant                learning_rate_constant
    linear_warmup           min(1, step / warmup)
    rsqrt_decay             max(step, warmup)^-0.5
    rsqrt_normalized_decay  warmup^0.5 * max(step, warmup)^-0.5
    rsqrt_hidden_size       d_model^-0.5
    legacy                  T2T's "legacy" schedule with its noam decay, the one of
                            transformer_base_v1 / v2: 5000 * learning_rate * noam, times 0.002
                            with Adam
    linear_decay            clip((train_steps - step) / decay, 0, 1): 1 until the last `decay`
                            updates of the run, then down to 0 at its end (`train_steps`, the
                            trainer's; decay: `learning_rate_decay_steps`)
    cosdecay                1 through the warmup, then 0.5 * (1 + cos(pi * step / decay))

T2T's later sets use `constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size`, the paper's curve
times `learning_rate_constant` (2.0 in those sets). `step` counts updates from 1 (T2T's legacy
schedule does too; its multiplicative ones start from 0, so their first update has a learning
rate of 0 there and every later one the value this gives one update earlier: with linear_decay
the last update here has a rate of 0, T2T's 1 / decay).
"""

import math

import keras
from keras import ops

from t2t_lite.hparams.base import schedule_factors

LEGACY_CONSTANT = 5000.0  # T2T's legacy schedule: 5000, times 0.002 for Adam ("optimizer_correction")


@keras.saving.register_keras_serializable(package="t2t_lite")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
  """The learning rate at optimizer update `step` (1-based: the first update uses step 1).

  Keras calls a schedule with the optimizer's step counter. With Keras' own gradient
  accumulation (`gradient_accumulation_steps` of a Keras optimizer) that counter advances once
  per micro-batch, and `accumulation_steps` converts it back to updates. The trainer
  accumulates itself and calls its optimizer once per update, so it passes 1.

  Args:
    hidden_size: d_model.
    warmup_steps: linear warmup length in updates.
    schedule: a product of factors ("constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size"),
      or "noam" (the paper's formula times `constant`).
    constant: T2T's `learning_rate_constant`.
    accumulation_steps: micro-batches per update.
    learning_rate: T2T's `learning_rate`, used by the "legacy" factor only (as in T2T).
    optimizer: "adam" or "adafactor": the legacy factor's correction (0.002 for Adam).
    decay_steps: T2T's `learning_rate_decay_steps` (linear_decay and cosdecay).
    train_steps: the update the run ends at (T2T's --train_steps), which linear_decay decays to;
      needed with that factor only. A variable is read at every update (the trainer's
      `decay_end`, which a time budget moves).

  Raises:
    ValueError: linear_decay without `train_steps`.
  """

  def __init__(self, hidden_size, warmup_steps, schedule="noam", constant=1.0, accumulation_steps=1,
               learning_rate=0.1, optimizer="adam", decay_steps=5000, train_steps=None):
    self.factors = schedule_factors(schedule)
    if "linear_decay" in self.factors and train_steps is None:
      raise ValueError(f"learning_rate_schedule {schedule!r}: linear_decay ends at the run's "
                       "train_steps, which this schedule was not given; train with --train_steps "
                       "(the trainer passes it), or pass train_steps=")
    self.hidden_size = hidden_size
    self.warmup_steps = warmup_steps
    self.schedule = schedule
    self.constant = constant
    self.accumulation_steps = accumulation_steps
    self.learning_rate = learning_rate
    self.optimizer = optimizer
    self.decay_steps = decay_steps
    self.train_steps = train_steps

  def _noam(self, step, warmup):
    return self.hidden_size ** -0.5 * ops.minimum(ops.rsqrt(step), step * warmup ** -1.5)

  def _factor(self, name, step, warmup):
    if name == "constant":
      return self.constant
    if name == "linear_warmup":
      return ops.minimum(1.0, step / warmup)
    if name == "rsqrt_decay":
      return ops.rsqrt(ops.maximum(step, warmup))
    if name == "rsqrt_normalized_decay":
      return warmup ** 0.5 * ops.rsqrt(ops.maximum(step, warmup))
    if name == "rsqrt_hidden_size":
      return self.hidden_size ** -0.5
    if name == "legacy":
      correction = 0.002 if self.optimizer == "adam" else 1.0
      return LEGACY_CONSTANT * correction * self.learning_rate * self._noam(step, warmup)
    if name == "linear_decay":
      end = ops.cast(self.train_steps, "float32")
      return ops.clip((end - step) / float(self.decay_steps), 0.0, 1.0)
    if name == "cosdecay":
      decayed = 0.5 * (1.0 + ops.cos(math.pi * step / float(self.decay_steps)))
      return ops.where(step <= warmup, 1.0, decayed)
    raise ValueError(f"unknown learning-rate factor {name!r}")

  def __call__(self, micro_step):
    step = ops.cast(ops.floor_divide(micro_step, self.accumulation_steps) + 1, "float32")
    warmup = float(max(self.warmup_steps, 1))
    if self.factors == ["noam"]:
      return self.constant * self._noam(step, warmup)
    rate = ops.ones((), "float32")
    for name in self.factors:
      rate = rate * self._factor(name, step, warmup)
    return rate

  def get_config(self):
    return dict(hidden_size=self.hidden_size, warmup_steps=self.warmup_steps,
                schedule=self.schedule, constant=self.constant,
                accumulation_steps=self.accumulation_steps, learning_rate=self.learning_rate,
                optimizer=self.optimizer, decay_steps=self.decay_steps,
                train_steps=None if self.train_steps is None else int(
                    ops.convert_to_numpy(self.train_steps)))

  @classmethod
  def from_hparams(cls, hparams, accumulation_steps=None, train_steps=None):
    """The hparams' schedule; `accumulation_steps` defaults to gradient_accumulation_steps;
    `train_steps` is the run's end (linear_decay needs it)."""
    if accumulation_steps is None:
      accumulation_steps = hparams.gradient_accumulation_steps
    return cls(hparams.hidden_size, hparams.learning_rate_warmup_steps,
               hparams.learning_rate_schedule, hparams.learning_rate_constant,
               accumulation_steps, hparams.learning_rate, hparams.optimizer,
               hparams.learning_rate_decay_steps, train_steps)
