"""Training as in the paper (section 5): Adam, warmup + inverse-sqrt decay, label smoothing.

`train_and_evaluate(problem, hparams, output_dir, ...)` is what `t2t-lite-trainer` calls and
what tests call. One code path serves one device, MirroredStrategy and multi-worker training:
a thin custom loop around `strategy.run` (as OpenNMT-tf does), so every step is visible:

- per-replica loss = sum of token losses / GLOBAL token count, gradients summed across replicas
  (Keras' optimizer all-reduces), so N replicas equal one device on the same global batch;
- checkpoints through `tf.train.CheckpointManager` (the index file is replaced atomically, so a
  kill during a save leaves the previous checkpoint as the latest); rerunning resumes;
- a non-finite loss stops training before anything is saved after it.
"""

import math
import os
import sys
import time
from collections.abc import Callable

import keras
import tensorflow as tf

from t2t_lite import model_dir
from t2t_lite.hparams import HParams
from t2t_lite.problems import Problem
from t2t_lite.training import distribute
from t2t_lite.training.adam import Adam
from t2t_lite.training.loss import fast_smoothed_cross_entropy, projected_cross_entropy
from t2t_lite.training.schedule import TransformerSchedule
from t2t_lite.token_ids import PAD_ID


class NonFiniteLossError(RuntimeError):
  pass


def build_optimizer(hparams: HParams) -> keras.optimizers.Optimizer:
  optimizer = Adam(
      learning_rate=TransformerSchedule.from_hparams(hparams),
      beta_1=hparams.optimizer_adam_beta1, beta_2=hparams.optimizer_adam_beta2,
      epsilon=hparams.optimizer_adam_epsilon,
      global_clipnorm=hparams.clip_grad_norm or None,
      gradient_accumulation_steps=(hparams.gradient_accumulation_steps
                                   if hparams.gradient_accumulation_steps > 1 else None))
  if hparams.mixed_precision == "mixed_float16":
    optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
  return optimizer


class Trainer:
  """Model, optimizer, checkpoints and the distributed train/eval steps for one run."""

  def __init__(self, hparams: HParams, vocab_size: int, output_dir: str,
               strategy: tf.distribute.Strategy | None = None, keep_checkpoint_max: int = 20,
               model: str = model_dir.DEFAULT_MODEL):
    self.hparams = hparams
    self.strategy = strategy or tf.distribute.get_strategy()
    self.output_dir = output_dir
    self.chief = distribute.is_chief(self.strategy)
    # Non-chief workers must write too (collectives), but to a directory of their own.
    ckpt_dir = output_dir if self.chief else os.path.join(
        output_dir, f".worker_{self.strategy.cluster_resolver.task_id}")
    with self.strategy.scope():
      self.model = model_dir.build_model(hparams, vocab_size, model)
      self.optimizer = build_optimizer(hparams)
      self.optimizer.build(self.model.trainable_variables)
      self.nonfinite = tf.Variable(False, trainable=False, name="nonfinite_loss_seen",
                                   aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    self.checkpoint = tf.train.Checkpoint(model=model_dir.checkpointable(self.model),
                                          optimizer=self.optimizer)
    self.manager = tf.train.CheckpointManager(self.checkpoint, ckpt_dir, max_to_keep=keep_checkpoint_max)
    self.restored_from = self.manager.latest_checkpoint
    if self.restored_from:
      self.checkpoint.restore(self.restored_from).assert_existing_objects_matched()
    self._train_fn = None
    self._eval_fn = None

  @property
  def step(self):
    """Optimizer updates done so far (micro-batches / accumulation steps)."""
    return int(self.optimizer.iterations.numpy())

  def _replica_step(self, batch):
    hp = self.hparams
    targets = batch["targets"]
    local_tokens = tf.reduce_sum(tf.cast(tf.not_equal(targets, PAD_ID), tf.float32))
    ctx = tf.distribute.get_replica_context()
    global_tokens = ctx.all_reduce(tf.distribute.ReduceOp.SUM, local_tokens)
    with tf.GradientTape() as tape:
      # The pre-softmax projection is fused into the loss (it drops padded positions and
      # computes the gradient in the same pass); the logits are never stored.
      decoder_output = self.model.decoder_output(batch, training=True)
      table = tf.convert_to_tensor(self.model.softmax.embeddings)
      bias = getattr(self.model.softmax, "logits_bias", None)  # an imported model's
      loss_sum, _, _ = projected_cross_entropy(decoder_output, table, targets, hp.label_smoothing,
                                               compact=not hp.xla_compile, bias=bias)
      loss = loss_sum / tf.maximum(global_tokens, 1.0)
      scaled = self.optimizer.scale_loss(loss) if hasattr(self.optimizer, "scale_loss") else loss
    grads = tape.gradient(scaled, self.model.trainable_variables)
    self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
    total_loss = ctx.all_reduce(tf.distribute.ReduceOp.SUM, loss)
    finite = tf.math.is_finite(total_loss)
    if hp.mixed_precision != "mixed_float16":  # with loss scaling, inf gradients are skipped steps
      finite = tf.logical_and(finite, tf.math.is_finite(tf.linalg.global_norm(grads)))
    self.nonfinite.assign(tf.logical_or(self.nonfinite, tf.logical_not(finite)))
    return total_loss, global_tokens

  def train_step(self, dist_batch):
    """One micro-step on a distributed batch; returns (mean token loss, target tokens)."""
    if self._train_fn is None:
      def fn(batch):
        loss, tokens = self.strategy.run(self._replica_step, args=(batch,))
        return (self.strategy.reduce("MEAN", loss, axis=None),
                self.strategy.reduce("MEAN", tokens, axis=None))
      self._train_fn = tf.function(fn, jit_compile=self.hparams.xla_compile or None,
                                   reduce_retracing=True)
    return self._train_fn(dist_batch)

  def check_finite(self):
    if bool(self.nonfinite.numpy()):
      raise NonFiniteLossError(
          f"training loss (or gradient) became NaN or infinite before step {self.step}; stopped "
          "without saving. "
          f"The last good checkpoint is {self.manager.latest_checkpoint}. Lower the learning rate "
          "(learning_rate_constant), raise learning_rate_warmup_steps, or set clip_grad_norm.")

  def save(self):
    self.check_finite()
    return self.manager.save(checkpoint_number=self.step)

  def evaluate(self, dataset, max_batches=None):
    """Dev loss (label-smoothed, per token), unsmoothed per-token NLL and perplexity."""
    if self._eval_fn is None:  # built once: later evaluations reuse its traces
      def eval_step(batch):
        logits = self.model(batch, training=False)
        return fast_smoothed_cross_entropy(logits, batch["targets"], self.hparams.label_smoothing)
      self._eval_fn = tf.function(eval_step, reduce_retracing=True)
    loss = tokens = nll = 0.0
    for i, batch in enumerate(dataset):
      if max_batches and i >= max_batches:
        break
      l, n, x = (float(v) for v in self._eval_fn(batch))
      loss, tokens, nll = loss + l, tokens + n, nll + x
    tokens = max(tokens, 1.0)
    return {"loss": loss / tokens, "nll": nll / tokens, "perplexity": math.exp(min(nll / tokens, 50))}


def _write_scalars(writer, step, values):
  """TensorBoard scalars through TF's core summary op (TensorBoard itself is only needed to view)."""
  if writer is None:
    return
  from tensorflow.core.framework import summary_pb2
  metadata = summary_pb2.SummaryMetadata(
      plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")).SerializeToString()
  with writer.as_default(step=step):
    for name, value in values.items():
      tf.summary.write(name, tf.constant(value, tf.float32), metadata=metadata)
  writer.flush()


def train_and_evaluate(
    problem: Problem, hparams: HParams, output_dir: str, data_dir: str | None = None,
    train_steps: int = 1000, eval_steps: int = 100, save_checkpoints_steps: int = 1000,
    keep_checkpoint_max: int = 20, eval_every: int | None = None, log_every: int = 100,
    strategy: tf.distribute.Strategy | None = None, flags: dict | None = None,
    overwrite: bool = False,
    train_dataset_fn: Callable[[tf.distribute.InputContext], tf.data.Dataset] | None = None,
    evaluate_fn: Callable[[keras.Model], dict[str, float]] | None = None,
    progress: bool | None = None, max_train_seconds: float | None = None,
    model: str = model_dir.DEFAULT_MODEL) -> dict[str, float]:
  """Trains `problem` with `hparams` into `output_dir` until `train_steps` updates, resuming.

  Args:
    problem: a Problem (t2t_lite.problems.get_problem).
    hparams: an HParams.
    output_dir: the model directory (hparams.json, checkpoints, TensorBoard logs).
    data_dir: where the problem keeps its vocabulary and prepared data.
    train_steps: total optimizer updates (a resumed run trains only the remainder).
    eval_steps: dev batches for loss/perplexity at each evaluation (0: no evaluation).
    save_checkpoints_steps: updates between checkpoints; one is also written at the end.
    eval_every: updates between evaluations (default: save_checkpoints_steps).
    strategy: a tf.distribute strategy (default: one device).
    flags: the command line, recorded in the model directory (hparams.json, flags.txt).
    overwrite: start over in an `output_dir` that holds a model trained with other settings.
    train_dataset_fn: `fn(input_context) -> tf.data` overriding the problem's training data.
    evaluate_fn: `fn(model) -> {name: value}`, more metrics at each evaluation, on the chief (as
      flax's train.py takes decode.py's): `t2t_lite.decoding.dev_bleu.bleu_evaluation` decodes
      dev sentences for real BLEU. Training itself never decodes.
    progress: show a console progress bar (default: when stdout is a terminal).
    max_train_seconds: stop (with a checkpoint and an evaluation) once this much wall time has
      passed in this run, even before `train_steps`; rerunning continues.
    model: the registered model to train (`t2t_lite.registry.models`), recorded in hparams.json.
  Returns:
    A dict with the final step, last training loss and the last evaluation's metrics.
  """
  strategy = strategy or tf.distribute.get_strategy()
  vocab = problem.get_vocab(data_dir)
  chief = distribute.is_chief(strategy)
  if chief:
    os.makedirs(output_dir, exist_ok=True)
    model_dir.write_model_dir(output_dir, hparams, problem.name, flags, vocab.vocab_size, overwrite,
                              model)
    model_dir.write_vocab(output_dir, vocab)
  trainer = Trainer(hparams, vocab.vocab_size, output_dir, strategy, keep_checkpoint_max, model)
  start = trainer.step
  if trainer.restored_from:
    print(f"resumed from {trainer.restored_from} at step {start}", flush=True)
  if start >= train_steps:
    print(f"already trained {start} >= train_steps={train_steps} steps; nothing to do", flush=True)
    return {"step": start}

  seeded = hparams.replace(seed=hparams.seed + start)  # a resumed run does not replay the same order
  dataset_fn = train_dataset_fn or (lambda ctx: problem.dataset(
      "train", data_dir, seeded, training=True, input_context=ctx))
  iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
  eval_every = eval_every or save_checkpoints_steps
  writers = ({k: tf.summary.create_file_writer(os.path.join(output_dir, k)) for k in ("train", "eval")}
             if chief else {"train": None, "eval": None})
  progress = sys.stdout.isatty() if progress is None else progress
  bar = keras.utils.Progbar(train_steps, stateful_metrics=["loss", "lr", "tok/s"]) if progress else None
  accumulation = hparams.gradient_accumulation_steps
  results = {}
  window_tokens, window_start, loss = 0.0, time.time(), float("nan")
  micro = 0
  run_start = time.time()
  while trainer.step < train_steps:
    loss_t, tokens_t = trainer.train_step(next(iterator))
    micro += 1
    window_tokens += float(tokens_t)
    if micro % accumulation:
      continue
    step = trainer.step
    out_of_time = bool(max_train_seconds) and time.time() - run_start > max_train_seconds
    if out_of_time:
      print(f"time budget of {max_train_seconds:.0f}s used at step {step}; stopping", flush=True)
    last = step == train_steps or out_of_time
    if step % log_every == 0 or last:
      trainer.check_finite()
      loss = float(loss_t)
      elapsed = max(time.time() - window_start, 1e-9)
      lr = float(trainer.optimizer.learning_rate)
      tok_s = window_tokens / elapsed
      _write_scalars(writers["train"], step, {"loss": loss, "learning_rate": lr, "tokens_per_sec": tok_s})
      if bar:
        bar.update(step, [("loss", loss), ("lr", lr), ("tok/s", tok_s)])
      else:
        print(f"step {step}: loss {loss:.4f} lr {lr:.3g} target tokens/s {tok_s:,.0f}", flush=True)
      window_tokens, window_start = 0.0, time.time()
    if step % save_checkpoints_steps == 0 or last:
      path = trainer.save()
      if chief:
        print(f"saved {path}", flush=True)
    if eval_steps and (step % eval_every == 0 or last):
      results = trainer.evaluate(problem.dataset("dev", data_dir, hparams, training=False), eval_steps)
      if evaluate_fn is not None and chief:
        results.update(evaluate_fn(trainer.model))
      _write_scalars(writers["eval"], step, results)
      print(f"eval at step {step}: " + ", ".join(f"{k} {v:.4f}" for k, v in results.items()), flush=True)
      window_start = time.time()
    if out_of_time:
      break
  results.update(step=trainer.step, train_loss=loss)
  return results
