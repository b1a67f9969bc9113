"""Learning-rate schedules (paper section 5.3 and T2T's variants).

The paper: `lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)` ("noam").
T2T's later sets use `constant * linear_warmup * rsqrt_decay * rsqrt_hidden_size`
("rsqrt_decay"), which is the same curve times `learning_rate_constant` (2.0 in those sets):
`constant * min(1, step / warmup) * max(step, warmup)^-0.5 * d_model^-0.5`.
"""

import keras
from keras import ops


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
    schedule: "noam" (the paper), "rsqrt_decay" (T2T) or "constant".
    constant: multiplier (T2T's `learning_rate_constant`).
    accumulation_steps: micro-batches per update.
  """

  def __init__(self, hidden_size, warmup_steps, schedule="noam", constant=1.0, accumulation_steps=1):
    if schedule not in ("noam", "rsqrt_decay", "constant"):
      raise ValueError(f"unknown learning_rate_schedule {schedule!r}: use noam, rsqrt_decay or constant")
    self.hidden_size = hidden_size
    self.warmup_steps = warmup_steps
    self.schedule = schedule
    self.constant = constant
    self.accumulation_steps = accumulation_steps

  def __call__(self, micro_step):
    step = ops.cast(ops.floor_divide(micro_step, self.accumulation_steps) + 1, "float32")
    warmup = float(max(self.warmup_steps, 1))
    if self.schedule == "constant":
      return ops.convert_to_tensor(self.constant, "float32")
    if self.schedule == "noam":
      return (self.constant * self.hidden_size ** -0.5 *
              ops.minimum(ops.rsqrt(step), step * warmup ** -1.5))
    return (self.constant * ops.minimum(1.0, step / warmup) *
            ops.rsqrt(ops.maximum(step, warmup)) * self.hidden_size ** -0.5)

  def get_config(self):
    return dict(hidden_size=self.hidden_size, warmup_steps=self.warmup_steps,
                schedule=self.schedule, constant=self.constant,
                accumulation_steps=self.accumulation_steps)

  @classmethod
  def from_hparams(cls, hparams, accumulation_steps=None):
    """The hparams' schedule; `accumulation_steps` defaults to gradient_accumulation_steps."""
    if accumulation_steps is None:
      accumulation_steps = hparams.gradient_accumulation_steps
    return cls(hparams.hidden_size, hparams.learning_rate_warmup_steps,
               hparams.learning_rate_schedule, hparams.learning_rate_constant, accumulation_steps)
