"""Training with Keras' own loop: `model.compile(...)` and `model.fit(...)`.

    from t2t_lite import model_dir
    from t2t_lite.training import keras_fit
    model = model_dir.build_model(hparams, vocab.vocab_size)
    keras_fit.compile_model(model, hparams)
    model.fit(keras_fit.fit_dataset(problem, "train", data_dir, hparams), steps_per_epoch=1000,
              epochs=10, validation_data=keras_fit.fit_dataset(problem, "dev", data_dir, hparams,
              training=False).take(100), callbacks=[keras.callbacks.TensorBoard("runs/fit/logs"),
              keras.callbacks.BackupAndRestore("runs/fit/backup"),
              keras.callbacks.EarlyStopping(patience=3, restore_best_weights=True)])

(Keras' TensorBoard callback needs the `tensorboard` package; the trainer itself does not.)
The loss is the trainer's: label-smoothed cross-entropy summed over the batch's target tokens
and divided by their count (`LabelSmoothedCrossEntropy`), the paper's Adam and learning-rate
schedule (`TransformerSchedule`, the step counting updates), T2T's clipping as Keras'
`global_clipnorm`. What `t2t-lite-trainer` adds and fit does not: token-count normalization
across replicas and accumulated micro-batches (Keras averages per replica), the fused
projection + loss that never stores the logits, dev BLEU by decoding, T2T's checkpoints and
model directory (`save_model_dir` writes one from a fitted model, so the decoder and exporter
take it).
"""

import os

import keras
import tensorflow as tf

from t2t_lite import model_dir
from t2t_lite.hparams import HParams
from t2t_lite.problems import Problem
from t2t_lite.training.loss import fast_smoothed_cross_entropy
from t2t_lite.training.schedule import TransformerSchedule


@keras.saving.register_keras_serializable(package="t2t_lite")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
  """The trainer's loss as a Keras loss: y_true target ids [batch, length] (0 = padding),
  y_pred logits [batch, length, vocab]; returns the label-smoothed loss summed over the target
  tokens / their count (one scalar per batch, as the trainer normalizes)."""

  def __init__(self, label_smoothing: float = 0.1, name: str = "label_smoothed_cross_entropy",
               **kwargs):
    super().__init__(name=name, **kwargs)
    self.label_smoothing = label_smoothing

  def call(self, y_true, y_pred):
    targets = tf.cast(y_true, tf.int32)  # Keras hands losses y_true in the loss's float dtype
    loss_sum, tokens, _ = fast_smoothed_cross_entropy(y_pred, targets, self.label_smoothing)
    return loss_sum / tf.maximum(tokens, 1.0)

  def get_config(self):
    return {**super().get_config(), "label_smoothing": self.label_smoothing}


def build_optimizer(hparams: HParams, train_steps: int | None = None) -> keras.optimizers.Optimizer:
  """Keras' Adam with the hparams' betas, epsilon, schedule and clipping (clip_grad_norm);
  `train_steps`, the updates fit will make, is where a linear_decay schedule ends.

  weight_ema_decay > 0 turns on Keras' own moving average of the weights (`use_ema`,
  `ema_momentum`): fit trains the weights and, when it ends, replaces them with their average
  (`finalize_variable_values`), which is then what the model evaluates, saves and decodes with.
  Keras' average starts at the weights after the first update (the trainer's at the starting
  weights) and fit's validation during training sees the trained weights, not the average."""
  if hparams.optimizer != "adam" or hparams.gradient_accumulation_steps != 1:
    raise ValueError("Keras' fit here uses Adam without accumulation; train with optimizer="
                     f"{hparams.optimizer}, gradient_accumulation_steps="
                     f"{hparams.gradient_accumulation_steps} through t2t-lite-trainer")
  if hparams.weight_decay:
    raise ValueError(f"weight_decay={hparams.weight_decay} (T2T's L2 term in the loss) is applied "
                     "by t2t-lite-trainer's loop, not by Keras' fit: train through t2t-lite-trainer, "
                     "or set weight_decay=0 and give fit a Keras regularizer")
  if hparams.rdrop_alpha:
    raise ValueError(f"rdrop_alpha={hparams.rdrop_alpha} (R-Drop: each batch twice and a KL term "
                     "in the loss) is applied by t2t-lite-trainer's loop, not by Keras' fit: train "
                     "through t2t-lite-trainer, or set rdrop_alpha=0")
  return keras.optimizers.Adam(
      learning_rate=TransformerSchedule.from_hparams(hparams, accumulation_steps=1,
                                                     train_steps=train_steps),
      beta_1=hparams.optimizer_adam_beta1, beta_2=hparams.optimizer_adam_beta2,
      epsilon=hparams.optimizer_adam_epsilon, global_clipnorm=hparams.clip_grad_norm or None,
      use_ema=hparams.weight_ema_decay > 0, ema_momentum=hparams.weight_ema_decay or 0.99)


def compile_model(model: keras.Model, hparams: HParams, **kwargs) -> keras.Model:
  """`model.compile` with the trainer's loss and optimizer (`kwargs` go to compile: metrics,
  jit_compile, ...)."""
  kwargs.setdefault("optimizer", build_optimizer(hparams))
  kwargs.setdefault("loss", LabelSmoothedCrossEntropy(hparams.label_smoothing))
  model.compile(**kwargs)
  return model


def fit_dataset(problem: Problem, split: str, data_dir: str | None, hparams: HParams,
                training: bool = True) -> tf.data.Dataset:
  """`problem.dataset(...)` as fit wants it: (features, target ids) pairs. The training split
  repeats without end: give fit `steps_per_epoch`."""
  dataset = problem.dataset(split, data_dir, hparams, training=training)
  return dataset.map(lambda features: (features, features["targets"]))


def save_model_dir(model: keras.Model, output_dir: str, hparams: HParams, problem: Problem,
                   data_dir: str | None = None, step: int | None = None) -> str:
  """Writes a fitted `model` as a model directory (hparams.json, vocabulary, a checkpoint at
  `step`, default the optimizer's updates), which the decoder, exporter and a later
  `t2t-lite-trainer` run (resuming with a fresh optimizer) take; returns the checkpoint."""
  vocab = problem.get_vocab(data_dir)
  os.makedirs(output_dir, exist_ok=True)
  model_dir.write_model_dir(output_dir, hparams, problem.name, {"keras_fit": True}, vocab.vocab_size)
  model_dir.write_vocab(output_dir, vocab)
  if step is None:
    step = int(model.optimizer.iterations.numpy()) if model.optimizer is not None else 0
  checkpoint = tf.train.Checkpoint(model=model_dir.checkpointable(model))
  return tf.train.CheckpointManager(checkpoint, output_dir, max_to_keep=None).save(checkpoint_number=step)
