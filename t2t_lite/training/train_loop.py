"""Training as in the paper (section 5): Adam, warmup + inverse-sqrt decay, label smoothing.

`train_and_evaluate(problem, hparams, output_dir, ...)` is what `t2t-lite-trainer` calls and
what tests call. One code path serves one device, MirroredStrategy and multi-worker training:
a thin custom loop around `strategy.run` (as OpenNMT-tf does), so every step is visible. One
optimizer update, on every replica of every worker:

1. each micro-batch: loss = sum of token losses / the micro-batch's GLOBAL token count (summed
   over replicas), and its gradients (`Trainer.gradients`, the part `xla_compile` compiles);
2. with `gradient_accumulation_steps` > 1, each replica adds gradient x tokens to running sums
   of its own (`GradientAccumulator`: replica-local variables, no communication) until the
   last micro-batch of the update;
3. one all-reduce sums the gradients and the loss over replicas and workers; divided by the
   tokens of the whole accumulated global batch, they are those of one big batch (T2T's
   multistep optimizer normalizes the same way when micro-batches hold different token counts);
4. every replica now holds the same gradient, so the non-finite check and the clipping by its
   global norm (`clip_grad_norm`) come out the same everywhere; T2T's `weight_decay` adds its L2
   term's gradient, weight_decay * w (biases aside: `weight_decayed`), before both;
5. the optimizer applies it without a second all-reduce (`Adam(aggregate_gradients=False)`).

So N replicas equal one device on the same global batch, clipping and accumulation included.
Keras' own `global_clipnorm` and `gradient_accumulation_steps` are not used: on TensorFlow they
clip each replica's gradient by its local norm before the all-reduce, and accumulation
averages micro-batches instead of weighting them by their tokens.

- Seeds: `hparams.seed` seeds the weights' initialization (`seed_initialization`) and
  every dropout seed generator; a resumed run reseeds dropout from (seed, step) so it does not
  replay the first run's masks. Each replica draws its own masks (`t2t_lite.layers.Dropout`).
- Checkpoints through `tf.train.CheckpointManager` (the index file is replaced atomically, so a
  kill during a save leaves the previous checkpoint as the latest); rerunning resumes.
- A NaN or infinite loss or gradient on any replica or worker stops every process (they all
  see the same all-reduced values) before anything is saved after it.
- Warm start (T2T's --warm_start_from, `model_dir.WarmStart`): a directory without checkpoints
  starts from another model's weights, with a fresh optimizer and step unless asked otherwise.
- With hparams weight_ema_decay > 0, `_update` keeps a moving average of the weights after the
  optimizer's update; evaluations run on it (`Trainer.evaluated_weights`) and checkpoints hold it.
- Each evaluation may become OUTPUT_DIR/best and stop training early (`t2t_lite.training.best`).
- Several workers (MultiWorkerMirroredStrategy) take every decision together: only the chief
  evaluates and keeps best/, and what it decides (stop early; from its clock, a time budget and
  checkpoints every N seconds) reaches every worker through one small all-reduce
  (`distribute.ChiefDecisions`), so all stop, save and evaluate at the same updates.
"""

import contextlib
import os
import random
import sys
import time
from collections.abc import Callable

import keras
import numpy as np
import tensorflow as tf

from t2t_lite import fast_path, model_dir
from t2t_lite.hparams import HParams
from t2t_lite.hparams.base import schedule_factors
from t2t_lite.problems import Problem
from t2t_lite.training import best as best_lib
from t2t_lite.training import distribute, evaluation
from t2t_lite.training.adafactor import adafactor
from t2t_lite.training.adam import Adam
from t2t_lite.training.loss import projected_cross_entropy
from t2t_lite.training.evaluation import write_scalars as _write_scalars
from t2t_lite.training.schedule import TransformerSchedule
from t2t_lite.token_ids import PAD_ID
from t2t_lite.graph_functions import batch_function, graph_function

SUM = tf.distribute.ReduceOp.SUM


class NonFiniteLossError(RuntimeError):
  pass


def build_optimizer(hparams: HParams, train_steps: int | None = None) -> keras.optimizers.Optimizer:
  """The hparams' optimizer (Adam, or T2T's Adafactor) and schedule; clipping and accumulation
  are the Trainer's. `train_steps`: the run's last update, where linear_decay ends."""
  # The optimizer is called once per update, so the schedule reads its counter as updates.
  learning_rate = TransformerSchedule.from_hparams(hparams, accumulation_steps=1,
                                                   train_steps=train_steps)
  if hparams.optimizer == "adafactor":
    optimizer = adafactor(learning_rate, aggregate_gradients=False)
  else:
    optimizer = Adam(learning_rate=learning_rate, beta_1=hparams.optimizer_adam_beta1,
                     beta_2=hparams.optimizer_adam_beta2, epsilon=hparams.optimizer_adam_epsilon,
                     aggregate_gradients=False)
  if hparams.mixed_precision == "mixed_float16":
    optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
  return optimizer


def weight_decayed(path: str, rank: int) -> bool:
  """Whether hparams weight_decay applies to the variable at `path`: T2T's rule (its
  `optimize.weight_decay`) skips 1-D variables named like a bias; Keras' layer norms name theirs
  beta (T2T's layer_norm_bias). Everything else decays: kernels, embeddings, layer-norm scales."""
  name = path.rsplit("/", 1)[-1]
  return not (rank == 1 and ("bias" in name or name == "beta"))


def seed_initialization(seed: int) -> None:
  """Seeds what Keras' initializers draw from (its global seed; Python's and NumPy's too).

  Not `keras.utils.set_random_seed`: its `tf.random.set_seed` clears TensorFlow's kernel cache,
  and with the kernels go the resources they own, such as the SentencePiece model of a dataset
  made before the Trainer ("Resource ..._SentencepieceOp... does not exist" at its next batch).
  Keras has no public call for its global seed alone.
  """
  from keras.src.backend.common import global_state  # pylint: disable=import-outside-toplevel
  from keras.src.random import seed_generator  # pylint: disable=import-outside-toplevel
  from keras.src.utils import rng_utils  # pylint: disable=import-outside-toplevel
  global_state.set_global_attribute(rng_utils.GLOBAL_RANDOM_SEED, seed)
  global_state.set_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR, None)
  random.seed(seed)
  np.random.seed(seed)


def seed_dropout(model: keras.Model, seed: int, step: int = 0) -> None:
  """Gives every seed generator of `model` (its dropout layers') a state drawn from (seed, step)."""
  rng = np.random.default_rng([seed, step])
  for variable in model.variables:
    if variable.name == "seed_generator_state":
      variable.assign(np.array([rng.integers(1, 2 ** 31), 0], variable.dtype))


class GradientAccumulator:
  """Each replica's running sums over the micro-batches of one update: gradients x tokens,
  loss sum and (global) tokens. Replica-local (`ON_READ`) variables: adding is free of
  communication; `total` adds the last micro-batch, returns the sums and resets them."""

  def __init__(self, variables):
    def local(shape, dtype):
      return tf.Variable(tf.zeros(shape, dtype), trainable=False,
                         synchronization=tf.VariableSynchronization.ON_READ,
                         aggregation=tf.VariableAggregation.SUM)
    self.gradients = [local(v.shape, v.dtype) for v in variables]
    self.loss_sum = local([], tf.float32)
    self.tokens = local([], tf.float32)

  def add(self, loss_sum, gradients, tokens):
    for total, gradient in zip(self.gradients, gradients):
      total.assign_add(gradient * tf.cast(tokens, gradient.dtype))
    self.loss_sum.assign_add(loss_sum)
    self.tokens.assign_add(tokens)

  def total(self, loss_sum, gradients, tokens):
    """(loss sum, sum of gradient x tokens / all tokens, all tokens) with this micro-batch."""
    tokens_total = self.tokens.read_value() + tokens
    divisor = tf.maximum(tokens_total, 1.0)
    gradients = [(total.read_value() + g * tf.cast(tokens, g.dtype)) / tf.cast(divisor, g.dtype)
                 for total, g in zip(self.gradients, gradients)]
    loss_sum = self.loss_sum.read_value() + loss_sum
    with tf.control_dependencies(gradients + [loss_sum, tokens_total]):
      for variable in self.gradients + [self.loss_sum, self.tokens]:
        variable.assign(tf.zeros_like(variable))
    return loss_sum, gradients, tokens_total


class Trainer:
  """Model, optimizer, checkpoints and the distributed train/eval steps for one run.

  hparams' "auto" precision and XLA become this machine's fast path (`fast_path.resolve`; the
  result in `self.hparams`, the path in `self.training_path`), unless the caller resolved them
  already and gives the path as `training_path` (train_and_evaluate, for hparams.json).
  `train_steps` is the update the run ends at, which a linear_decay schedule decays to
  (`decay_end`, which a run with a time budget moves to where its clock will stop it).
  """

  def __init__(self, hparams: HParams, vocab_size: int, output_dir: str,
               strategy: tf.distribute.Strategy | None = None, keep_checkpoint_max: int = 20,
               model: str = model_dir.DEFAULT_MODEL,
               keep_checkpoint_every_n_hours: float | None = None,
               warm_start: model_dir.WarmStart | None = None,
               training_path: fast_path.TrainingPath | None = None,
               train_steps: int | None = None):
    self.strategy = strategy or tf.distribute.get_strategy()
    if training_path is None:
      hparams, training_path = fast_path.resolve(hparams, self.strategy)
    elif (hparams.mixed_precision, hparams.xla_compile) != (training_path.mixed_precision,
                                                           training_path.xla_compile):
      raise ValueError(f"training_path {training_path.summary!r} is not the one of hparams "
                       f"mixed_precision={hparams.mixed_precision},xla_compile={hparams.xla_compile}"
                       ": give the hparams fast_path.resolve returned with it")
    self.hparams, self.training_path = hparams, training_path
    distribute.check_supported(self.strategy, hparams)
    self.output_dir = output_dir
    self.chief = distribute.is_chief(self.strategy)
    # Non-chief workers must write too (collectives), but to a directory of their own.
    ckpt_dir = output_dir if self.chief else os.path.join(
        output_dir, f".worker_{self.strategy.cluster_resolver.task_id}")
    seed_initialization(hparams.seed)
    with self.strategy.scope():
      self.model = model_dir.build_model(hparams, vocab_size, model)
      self._variables = model_dir.checkpointable(self.model)  # walked once: {path: variable}
      # linear_decay's end as a variable the schedule reads every update: a run with a time
      # budget moves it to the update its clock will stop at (train_and_evaluate).
      self.decay_end = (tf.Variable(float(train_steps), trainable=False, name="decay_end",
                                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
                        if train_steps and "linear_decay" in schedule_factors(
                            hparams.learning_rate_schedule) else None)
      self.optimizer = build_optimizer(hparams, self.decay_end if self.decay_end is not None
                                       else train_steps)
      self.optimizer.build(self.model.trainable_variables)
      self.accumulator = (GradientAccumulator(self.model.trainable_variables)
                          if hparams.gradient_accumulation_steps > 1 else None)
      self.nonfinite = tf.Variable(False, trainable=False, name="nonfinite_loss_seen",
                                   aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
      # The weights' moving averages (hparams weight_ema_decay): every replica holds the same
      # weights after an update, so the first replica's average is every replica's.
      self.ema = {name: tf.Variable(tf.convert_to_tensor(v), trainable=False, name="ema",
                                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
                  for name, v in self._variables.items() if v.trainable
                  } if hparams.weight_ema_decay > 0 else None
    self._ema_pairs = [(average, self._variables[name]) for name, average in (self.ema or {}).items()]
    self.checkpoint = tf.train.Checkpoint(model=self._variables,
                                          optimizer=self.optimizer,
                                          **({model_dir.EMA_ROOT: self.ema} if self.ema else {}))
    self.manager = tf.train.CheckpointManager(
        self.checkpoint, ckpt_dir, max_to_keep=keep_checkpoint_max,
        keep_checkpoint_every_n_hours=keep_checkpoint_every_n_hours)
    self.restored_from = self.manager.latest_checkpoint
    self.warm_started_from = None
    if self.restored_from:
      self.checkpoint.restore(self.restored_from).assert_existing_objects_matched()
    elif warm_start is not None:  # T2T: a warm start only initializes a directory without checkpoints
      self._warm_start(warm_start)
    seed_dropout(self.model, hparams.seed, self.step)
    self.gradients_fn = (graph_function(self.gradients, jit_compile=True, reduce_retracing=True)
                         if hparams.xla_compile else self.gradients)
    self._micro_batches = 0
    self._step_fns = {}
    self._eval_fn = None
    # The batches' type spec (a distributed iterator's `element_spec`), if known before the first
    # step: the step is then traced once, for every batch shape the spec admits, instead of once
    # for the first shape and again for the relaxed one (`train_and_evaluate` sets it).
    self.batch_spec = None

  def _warm_start(self, warm_start: model_dir.WarmStart):
    """The source checkpoint's weights (and, as asked, its optimizer state and step); a model
    that does not fit it is a ModelDirError naming the variables that differ.

    A source trained with weight_ema_decay starts the new run from its moving averages: the
    model its evaluations, decoder and exporter saw (`model_dir.restore_weights`), as Marian's
    --pretrained-model takes its smoothed model. With keep_optimizer it starts from the trained
    weights instead, the ones Adam's moments belong to (continuing that training)."""
    path = warm_start.checkpoint
    model_dir.check_checkpoint_fits(self.model, path)
    source_step = model_dir.checkpoint_step(path)
    if warm_start.keep_optimizer and source_step is None:
      raise model_dir.ModelDirError(f"--warm_start_keep_optimizer: {path} holds no optimizer state "
                                    "(an imported or averaged model); leave the option out")
    try:
      if warm_start.keep_optimizer:
        tf.train.Checkpoint(model=self._variables, optimizer=self.optimizer).restore(
            path).expect_partial().assert_existing_objects_matched()
      else:
        model_dir.restore_weights(self.model, path)
    except AssertionError as e:  # e.g. another optimizer's state with keep_optimizer
      raise model_dir.ModelDirError(f"cannot warm start from {path}: {e}") from None
    self.optimizer.iterations.assign((source_step or 0) if warm_start.keep_step else 0)
    for average, variable in self._ema_pairs:  # the average starts from the warm-start weights
      average.assign(tf.convert_to_tensor(variable))
    self.warm_started_from = path

  @property
  def step(self):
    """Optimizer updates done so far."""
    return int(self.optimizer.iterations.numpy())

  # --- One update, per replica (inside strategy.run). --------------------------------------------

  def gradients(self, batch, tokens):
    """(loss sum, gradients of loss sum / `tokens`) of this replica's micro-batch; with
    mixed_float16 the gradients are multiplied by the loss scale. The only part of a step that
    `xla_compile` compiles: it holds no cross-replica communication."""
    with tf.GradientTape() as tape:
      # The pre-softmax projection is fused into the loss (it drops padded positions and
      # computes the gradient in the same pass); the logits are never stored.
      decoder_output = self.model.decoder_output(batch, training=True)
      table = tf.convert_to_tensor(self.model.softmax.embeddings)
      bias = getattr(self.model.softmax, "logits_bias", None)  # an imported model's
      # With R-Drop the batch holds its pairs twice (`_micro_batch`).
      loss_sum, _, _ = projected_cross_entropy(decoder_output, table, batch["targets"],
                                               self.hparams.label_smoothing,
                                               compact=not self.hparams.xla_compile, bias=bias,
                                               rdrop_alpha=self.hparams.rdrop_alpha)
      scaled = self.optimizer.scale_loss(loss_sum / tokens)
    variables = self.model.trainable_variables
    # Dense: accumulated, summed and scaled alike (an embedding looked up and not used as the
    # softmax has tf.IndexedSlices; Adam's update of it is dense either way).
    return loss_sum, [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                      for g, v in zip(tape.gradient(scaled, variables), variables)]

  def _micro_batch(self, batch):
    """(loss sum, gradients, tokens): tokens are the micro-batch's over all replicas. With
    R-Drop (hparam `rdrop_alpha`) the micro-batch's pairs go through the model twice, as one
    batch of the pairs repeated: its tokens count twice, so the loss stays a mean per token."""
    if self.hparams.rdrop_alpha > 0:
      batch = {key: tf.concat([t, t], axis=0) for key, t in batch.items()}
    local_tokens = tf.reduce_sum(tf.cast(tf.not_equal(batch["targets"], PAD_ID), tf.float32))
    tokens = tf.distribute.get_replica_context().all_reduce(SUM, local_tokens)
    loss_sum, grads = self.gradients_fn(batch, tf.maximum(tokens, 1.0))
    return loss_sum, grads, tokens

  def _accumulate(self, batch):
    loss_sum, grads, tokens = self._micro_batch(batch)
    self.accumulator.add(loss_sum, grads, tokens)
    # this replica's share of the loss
    return loss_sum / tf.maximum(tokens, 1.0), self._data_tokens(tokens)

  def _data_tokens(self, tokens):
    """The micro-batch's target tokens as the data has them (R-Drop counts each pair twice)."""
    return tokens / 2 if self.hparams.rdrop_alpha > 0 else tokens

  def _update(self, batch):
    """The last micro-batch of an update: all-reduce, check, clip, apply (see the module doc)."""
    loss_sum, grads, tokens = self._micro_batch(batch)
    batch_tokens = self._data_tokens(tokens)
    if self.accumulator is not None:
      loss_sum, grads, tokens = self.accumulator.total(loss_sum, grads, tokens)
    *grads, loss_sum = tf.distribute.get_replica_context().all_reduce(SUM, [*grads, loss_sum])
    loss = loss_sum / tf.maximum(tokens, 1.0)
    scale = tf.cast(getattr(self.optimizer, "dynamic_scale", 1.0), tf.float32)  # mixed_float16
    if self.hparams.weight_decay > 0:  # T2T's L2 term in the loss: its gradient, once per update
      decay = self.hparams.weight_decay * scale  # scaled as the loss's gradients are
      grads = [g + tf.cast(decay, g.dtype) * tf.convert_to_tensor(v)
               if weight_decayed(v.path, len(v.shape)) else g
               for g, v in zip(grads, self.model.trainable_variables)]
    norm = tf.linalg.global_norm(grads) / scale
    finite = tf.math.is_finite(loss)
    if self.hparams.mixed_precision != "mixed_float16":  # with loss scaling, inf gradients are skipped steps
      finite = tf.logical_and(finite, tf.math.is_finite(norm))
    clip = self.hparams.clip_grad_norm
    if clip > 0:  # tf.clip_by_global_norm's rule, on the summed gradient
      factor = clip / tf.maximum(norm, clip)
      grads = [g * tf.cast(factor, g.dtype) for g in grads]
    self.optimizer.apply(grads, self.model.trainable_variables)
    decay = self.hparams.weight_ema_decay
    if self._ema_pairs and isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
      # It skips an update whose scaled gradients overflowed (and only lowers the loss scale):
      # the average skips it too, by its own test, rather than moving towards unchanged weights.
      decay = tf.where(self.optimizer.check_finite(grads), decay, 1.0)
    for average, variable in self._ema_pairs:  # after the update (program order in tf.function)
      average.assign(decay * average + (1.0 - decay) * tf.convert_to_tensor(variable))
    self.nonfinite.assign(tf.logical_or(self.nonfinite, tf.logical_not(finite)))
    return loss, batch_tokens

  # --- The host side. -----------------------------------------------------------------------------

  def _step_fn(self, kind):
    """The tf.function running `_update` or `_accumulate` on every replica."""
    if kind not in self._step_fns:
      replica_fn = self._update if kind == "update" else self._accumulate

      def step(batch):
        loss, tokens = self.strategy.run(replica_fn, args=(batch,))
        if kind == "accumulate":  # each replica holds its share of the micro-batch's loss
          return self.strategy.reduce(SUM, loss, axis=None), self._first(tokens)
        return self._first(loss), self._first(tokens)  # the same on every replica
      self._step_fns[kind] = batch_function(step, self.batch_spec)
    return self._step_fns[kind]

  def _first(self, value):
    return self.strategy.experimental_local_results(value)[0]

  def train_step(self, dist_batch):
    """One micro-batch on every replica (a distributed batch; a plain one on one device).

    Every `gradient_accumulation_steps`-th call applies an update. Returns (mean token loss,
    target tokens of this micro-batch); at an update the loss is that of the whole update.
    """
    self._micro_batches += 1
    last = self._micro_batches % self.hparams.gradient_accumulation_steps == 0
    return self._step_fn("update" if last else "accumulate")(dist_batch)

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
    """Dev loss (label-smoothed, per token), unsmoothed per-token NLL and perplexity (of the
    weights' moving averages when weight_ema_decay > 0: call inside `evaluated_weights`)."""
    # Built once for the dataset's element_spec (one trace for all its batch shapes): later
    # evaluations of a dataset of the same spec reuse it.
    if self._eval_fn is None or self._eval_fn.input_signature[0] != dataset.element_spec:
      self._eval_fn = evaluation.eval_step_fn(self.model, self.hparams.label_smoothing,
                                              dataset.element_spec)
    return evaluation.evaluate(self._eval_fn, dataset, max_batches)

  @contextlib.contextmanager
  def evaluated_weights(self):
    """Within: the model holds what evaluation, decoding and export use (the moving averages
    of the weights with weight_ema_decay > 0; else the weights themselves, untouched)."""
    if not self._ema_pairs:
      yield self.model
      return
    trained = [tf.identity(variable.value) for _, variable in self._ema_pairs]
    for average, variable in self._ema_pairs:
      variable.assign(average.read_value())
    try:
      yield self.model
    finally:
      for value, (_, variable) in zip(trained, self._ema_pairs):
        variable.assign(value)


def train_and_evaluate(
    problem: Problem, hparams: HParams, output_dir: str, data_dir: str | None = None,
    train_steps: int = 1000, eval_steps: int = 100, save_checkpoints_steps: int = 1000,
    keep_checkpoint_max: int = 20, eval_every: int | None = None, log_every: int = 100,
    strategy: tf.distribute.Strategy | None = None, flags: dict | None = None,
    overwrite: bool = False,
    train_dataset_fn: Callable[[tf.distribute.InputContext], tf.data.Dataset] | None = None,
    evaluate_fn: Callable[[keras.Model], dict[str, float]] | None = None,
    progress: bool | None = None, max_train_seconds: float | None = None,
    model: str = model_dir.DEFAULT_MODEL,
    save_checkpoints_secs: float = 0, keep_checkpoint_every_n_hours: float | None = None,
    eval_split: str = "dev", warm_start: model_dir.WarmStart | None = None,
    early_stopping: best_lib.EarlyStopping | None = None) -> dict[str, float]:
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
    save_checkpoints_secs: > 0: checkpoint every this many seconds instead of every
      `save_checkpoints_steps`, and (unless `eval_every` is given) evaluate at each (T2T).
    keep_checkpoint_every_n_hours: also keep one checkpoint per this many hours beyond
      `keep_checkpoint_max` (T2T; None: no).
    eval_split: the split evaluations use ("test": T2T's --eval_use_test_set).
    warm_start: start from another model's checkpoint (T2T's --warm_start_from) when
      `output_dir` has no checkpoint yet; `problem` must read the data in that model's vocabulary
      and `hparams` have its architecture (`model_dir.warm_start_settings` gives both).
    early_stopping: which evaluation metric picks the best checkpoint, kept as OUTPUT_DIR/best
      whenever evaluations run (default: dev BLEU when `evaluate_fn` gives it, else dev loss),
      and the patience after which training stops (`t2t_lite.training.best`).
  Returns:
    A dict with the final step, last training loss, the last evaluation's metrics and, when
    evaluations ran, the best one's step and metric (`best_step`, `best_<metric>`).
  """
  strategy = strategy or tf.distribute.get_strategy()
  vocab = problem.get_vocab(data_dir)
  chief = distribute.is_chief(strategy)
  decisions = distribute.ChiefDecisions(strategy)  # the chief's, on every worker
  # hparams.json keeps the hparams as given ("auto" stays "auto": a rerun elsewhere decides
  # again) and, beside them, the path this run takes; the Trainer takes the resolved ones.
  resolved, path = fast_path.resolve(hparams, strategy)
  if chief:
    os.makedirs(output_dir, exist_ok=True)
    model_dir.write_model_dir(output_dir, hparams, problem.name, flags, vocab.vocab_size, overwrite,
                              model, training_path=path.record())
    model_dir.write_vocab(output_dir, vocab)
    print(f"training path: {path}", flush=True)
  trainer = Trainer(resolved, vocab.vocab_size, output_dir, strategy, keep_checkpoint_max, model,
                    keep_checkpoint_every_n_hours, warm_start, training_path=path,
                    train_steps=train_steps)
  hparams = trainer.hparams
  # Only the chief evaluates and keeps the best (another worker would compute its own metrics,
  # or none where they are the chief's, such as dev BLEU); it shares what it decides.
  keeper = best_lib.BestKeeper(output_dir, early_stopping) if eval_steps and chief else None
  start = trainer.step
  if trainer.restored_from:
    print(f"resumed from {trainer.restored_from} at step {start}", flush=True)
  elif trainer.warm_started_from:
    print(f"warm start from {trainer.warm_started_from} at step {start}", flush=True)
  if start >= train_steps:
    print(f"already trained {start} >= train_steps={train_steps} steps; nothing to do", flush=True)
    return {"step": start}
  stopped = bool(keeper and keeper.should_stop(start)
                 and keeper.settings.metric in (None, keeper.best["metric"]))  # rerunning a stopped run
  if eval_steps and bool(decisions.share(stopped)[0]):
    if keeper is None:
      print("already stopped early (the chief's decision, from its best/); nothing to do", flush=True)
      return {"step": start, "stopped_early": start}
    since = keeper.patience_from["step"]
    print(f"already stopped early: {keeper.best['metric']} has not improved by more than "
          f"{keeper.settings.delta} since step {since}, {start - since} updates >= the patience "
          f"of {keeper.settings.patience}; nothing to do", flush=True)
    return {"step": start, "stopped_early": start, "best_step": keeper.best["step"],
            f"best_{keeper.best['metric']}": keeper.best["value"]}

  seeded = hparams.replace(seed=hparams.seed + start)  # a resumed run does not replay the same order
  dataset_fn = train_dataset_fn or (lambda ctx: problem.dataset(
      "train", data_dir, seeded, training=True, input_context=ctx))
  iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
  trainer.batch_spec = iterator.element_spec
  eval_at_saves = eval_every is None and save_checkpoints_secs > 0
  eval_every = eval_every or save_checkpoints_steps
  writers = ({k: tf.summary.create_file_writer(os.path.join(output_dir, k)) for k in ("train", "eval")}
             if chief else {"train": None, "eval": None})
  progress = sys.stdout.isatty() if progress is None else progress
  bar = keras.utils.Progbar(train_steps, stateful_metrics=["loss", "lr", "tok/s"]) if progress else None
  accumulation = hparams.gradient_accumulation_steps
  results = {}
  # The updates and target tokens since the last log line, and when that window began: what the
  # log's rates divide (an evaluation starts a new window, so its time counts in neither).
  window_tokens, window_updates, window_start, loss = 0.0, 0, time.time(), float("nan")
  micro = 0
  run_start = last_save = time.time()
  # With a time budget, linear_decay ends where the clock will stop the run: at each log line,
  # the update reached at this run's rate since its first log line (start-up and compiling
  # left out, evaluations in) when the budget is spent (the chief's estimate, for every worker).
  clock_decay = bool(max_train_seconds) and trainer.decay_end is not None
  decay_end = float(train_steps)  # what trainer.decay_end holds, kept here: no read per update
  rate_from = None  # (step, time) of this run's first log line

  def save():
    nonlocal last_save
    saved = trainer.save()
    last_save = time.time()
    if chief:
      print(f"saved {saved}", flush=True)
    return saved

  def evaluate(step, saved):
    """Evaluates on the chief and keeps the best; returns whether to stop early (the chief's
    view: every process shares it). `saved`: the checkpoint just saved at this step, if any."""
    nonlocal results
    if keeper is None:  # another worker waits for the chief's decision
      return False
    with trainer.evaluated_weights() as evaluated:
      results = trainer.evaluate(problem.dataset(eval_split, data_dir, hparams, training=False),
                                 eval_steps)
      if evaluate_fn is not None:
        results.update(evaluate_fn(evaluated))
    _write_scalars(writers["eval"], step, results)
    print(f"eval at step {step}: " + ", ".join(f"{k} {v:.4f}" for k, v in results.items()),
          flush=True)
    # A new best becomes best/, linking the checkpoint just saved at this step rather than
    # saving it again.
    if keeper.update(step, results, trainer.checkpoint, saved):
      print(f"best {keeper.best['metric']} so far ({keeper.best['value']:.4f}) at step {step}: "
            f"kept as {best_lib.best_dir(output_dir)}", flush=True)
    return keeper.should_stop(step)

  while trainer.step < train_steps:
    loss_t, tokens_t = trainer.train_step(next(iterator))
    micro += 1
    window_tokens += float(tokens_t)
    if micro % accumulation:
      continue
    window_updates += 1
    trainer.check_finite()  # every update: all processes see the same flag and stop together
    step = trainer.step
    # Decisions from the clock are the chief's: every worker's clock runs apart.
    out_of_time = bool(max_train_seconds) and time.time() - run_start > max_train_seconds
    save_due = (time.time() - last_save >= save_checkpoints_secs if save_checkpoints_secs
                else step % save_checkpoints_steps == 0)
    if max_train_seconds or save_checkpoints_secs:  # else both follow the step, the same everywhere
      out_of_time, save_due = (bool(value) for value in decisions.share(out_of_time, save_due))
    if out_of_time:
      print(f"time budget of {max_train_seconds:.0f}s used at step {step}; stopping", flush=True)
    decayed = clock_decay and step >= decay_end
    if decayed and not out_of_time:
      print(f"linear_decay reached 0 at step {step}, the estimated end of the time budget; "
            "stopping", flush=True)
    last = step == train_steps or out_of_time or decayed
    if step % log_every == 0 or last:
      loss = float(loss_t)
      elapsed = max(time.time() - window_start, 1e-9)
      lr = float(trainer.optimizer.learning_rate)
      tok_s, updates_s = window_tokens / elapsed, window_updates / elapsed
      _write_scalars(writers["train"], step, {"loss": loss, "learning_rate": lr, "tokens_per_sec": tok_s,
                                              "global_step/sec": updates_s})  # T2T's name
      if bar:
        bar.update(step, [("loss", loss), ("lr", lr), ("tok/s", tok_s)])
      else:
        print(f"step {step}: loss {loss:.4f} lr {lr:.3g} target tokens/s {tok_s:,.0f} "
              f"updates/s {updates_s:.4g}", flush=True)
      window_tokens, window_updates, window_start = 0.0, 0, time.time()
      if clock_decay and not last:
        now = time.time()
        if rate_from is None:
          rate_from = (step, now)
        elif step > rate_from[0]:
          rate = (step - rate_from[0]) / (now - rate_from[1])
          end = step + rate * max(max_train_seconds - (now - run_start), 0.0)
          decay_end = min(decisions.share(round(end))[0], float(train_steps))
          trainer.decay_end.assign(decay_end)
          if chief:
            print(f"linear_decay ends at step {decay_end:.0f}: this run's "
                  f"{rate:.3g} updates/s until its time budget is spent", flush=True)
    save_now = last or save_due
    path = save() if save_now else None
    eval_now = bool(eval_steps) and (last or (save_now if eval_at_saves else step % eval_every == 0))
    if eval_now:
      stop = evaluate(step, path)
      if bool(decisions.share(stop)[0]):
        if keeper is None:
          print(f"early stopping at step {step} (the chief's decision)", flush=True)
        else:
          since = keeper.patience_from["step"]
          print(f"early stopping at step {step}: {keeper.best['metric']} has not improved by more "
                f"than {keeper.settings.delta} in {step - since} updates since step {since} (the "
                f"best: step {keeper.best['step']})", flush=True)
        if not save_now:
          save()   # logged as every checkpoint is
        results["stopped_early"] = step
        break
      window_tokens, window_updates, window_start = 0.0, 0, time.time()
    if out_of_time or decayed:
      break
    if max_train_seconds and not last and (save_now or eval_now) and bool(decisions.share(
        time.time() - run_start > max_train_seconds)[0]):
      # The budget ran out during this save or evaluation: the run ends at this step, with its
      # checkpoint and an evaluation, rather than one update later, where its last checkpoint would
      # be one update after this one (two nearly equal checkpoints in an average of the last N).
      print(f"time budget of {max_train_seconds:.0f}s used at step {step} (during its "
            f"{'evaluation' if eval_now else 'save'}); stopping", flush=True)
      loss = float(loss_t)  # the run's train_loss is its last update's, as at any other end
      if not save_now:
        path = save()
      if eval_steps and not eval_now:
        evaluate(step, path)
      break
  results.update(step=trainer.step, train_loss=loss)
  if keeper is not None and keeper.best is not None:
    results.update({"best_step": keeper.best["step"], f"best_{keeper.best['metric']}": keeper.best["value"]})
  return results
