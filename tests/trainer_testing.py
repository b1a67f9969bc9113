"""Helpers for tests of the Trainer's update."""

import tensorflow as tf


def record_applied_gradients(trainer):
  """Makes `trainer`'s optimizer keep a copy of the gradients it applies: returns one variable per
  trainable variable, each holding the gradient of the last update applied (read with .numpy())."""
  received = [tf.Variable(tf.zeros_like(v)) for v in trainer.model.trainable_variables]
  apply = trainer.optimizer.apply

  def recording_apply(grads, trainable):
    for slot, grad in zip(received, grads):
      slot.assign(grad)
    return apply(grads, trainable)

  trainer.optimizer.apply = recording_apply
  return received
