"""Data-parallel measurements in a process of their own; tests/test_data_parallel.py asserts on them.

Logical devices can be configured only before TensorFlow starts, and a process holds one
MultiWorkerMirroredStrategy, so each configuration is a process:

    python tests/data_parallel_checks.py mirrored N OUT   # MirroredStrategy over N logical CPUs
    python tests/data_parallel_checks.py worker I OUT     # worker I of the TF_CONFIG cluster

Each writes OUT/<mode>-<N or I>.json (the worker its weights too, OUT/weights-I.npz; the 2-device
run its weights' moving average, OUT/ema-2.npz).
"""

import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

MODE, OUT = sys.argv[1], sys.argv[3]
if MODE == "mirrored":
  DEVICES = [int(n) for n in sys.argv[2].split(",")]
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * max(DEVICES))
else:
  INDEX = int(sys.argv[2])

from t2t_lite import model_dir, registry  # noqa: E402
from t2t_lite.hparams import get_hparams  # noqa: E402
from t2t_lite.layers import Dropout, SymbolDropout  # noqa: E402
from t2t_lite.layers.dropout import numpy_keep_mask  # noqa: E402
from t2t_lite.models.transformer import Transformer  # noqa: E402
from t2t_lite.problems import get_problem  # noqa: E402
from t2t_lite.training import best, train_loop  # noqa: E402

MICRO = ("hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1,batch_size=256,"
         "max_length=16,eval_bleu_examples=0")
NO_DROPOUT = ",layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0"
EMA_DECAY = 0.7   # the moving average of the 2-device process (tests/test_data_parallel.py's)
# Which replica's gradient is poisoned, with what, from its how-many-th training call on.
POISON = {"value": float("nan"), "replica": 1, "from_call": 5}


@registry.models.register(name="transformer_poisoned_gradient")
class PoisonedGradient(Transformer):
  """The Transformer plus one scalar weight whose gradient is POISON["value"] on replica
  POISON["replica"] from that replica's POISON["from_call"]-th training call on, and 0 before
  (and on every other replica). The weight adds exactly 0 to the output, so the loss stays
  finite: only one replica's gradients are poisoned."""

  def build(self, input_shape=None):
    super().build(input_shape)
    self.poison_weight = self.add_weight(shape=(), initializer="zeros", name="poison")
    # Each replica counts its own calls (a replica-local variable, outside Keras' tracking).
    self.calls = [tf.Variable(0, trainable=False, synchronization=tf.VariableSynchronization.ON_READ,
                              aggregation=tf.VariableAggregation.SUM)]

  def decoder_output(self, inputs, training=None):
    output = super().decoder_output(inputs, training)
    if not training:
      return output
    calls = self.calls[0]
    calls.assign_add(1)
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    poisoned = tf.logical_and(tf.equal(replica, POISON["replica"]),
                              calls.read_value() >= POISON["from_call"])

    @tf.custom_gradient
    def zero(weight):
      return weight * 0.0, lambda dy: tf.where(poisoned, POISON["value"], 0.0)

    return output + tf.cast(zero(self.poison_weight), output.dtype)


TRAINERS = []
SCORES = {3: 10.0, 4: 9.0}  # the chief's made-up dev BLEU at the updates it evaluates


class FakeClock:
  """The trainer's `time` module with a clock that reads `seconds` per update done (of the
  newest trainer): each worker's own rate."""

  def __init__(self, seconds):
    self.seconds = seconds

  def time(self):
    return TRAINERS[-1].step * self.seconds if TRAINERS else 0.0


class RecordingTrainer(train_loop.Trainer):
  """The trainer, remembered, so the worker can save the weights it holds after training; and
  the target tokens each of its steps reported (`tokens_seen`)."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.tokens_seen = []
    TRAINERS.append(self)

  def train_step(self, dist_batch):
    loss, tokens = super().train_step(dist_batch)
    self.tokens_seen.append(float(tokens))
    return loss, tokens


train_loop.Trainer = RecordingTrainer


def replica_masks(strategy, seed):
  """Each local replica's keep mask of a fresh Dropout(0.5, seed) on ones [6, 40], and its key."""
  with strategy.scope():
    layer = Dropout(0.5, seed=seed)
  key = layer.seed_generator.state.numpy().tolist()
  drawn = tf.function(lambda: strategy.run(lambda: layer(tf.ones([6, 40]), training=True)))()
  return [(m.numpy() != 0) for m in strategy.experimental_local_results(drawn)], key


def replica_symbol_masks(strategy, seed):
  """Each local replica's dropped symbols (True: set to PAD) of a fresh SymbolDropout(0.5, seed)
  on ids [6, 40] of 5."""
  with strategy.scope():
    layer = SymbolDropout(0.5, seed=seed)
  ids = tf.fill([6, 40], 5)
  drawn = tf.function(lambda: strategy.run(lambda: layer(ids, training=True)))()
  return [(m.numpy() == 0).astype(int).tolist() for m in strategy.experimental_local_results(drawn)]


def check_masks(strategy, first_replica):
  masks, key = replica_masks(strategy, seed=11)
  again, _ = replica_masks(strategy, seed=11)
  return {"symbol_masks": replica_symbol_masks(strategy, seed=11),
          "masks": [m.astype(int).tolist() for m in masks],
          "reference": [numpy_keep_mask(m.shape, 0.5, key, first_replica + i).astype(int).tolist()
                        for i, m in enumerate(masks)],
          "rerun_same": all(np.array_equal(a, b) for a, b in zip(masks, again))}


def trainer_masks(strategy, out):
  """Each local replica's keep mask [3, 8, 32] of the model's embedding dropout (rate 0.5) in
  two of the Trainer's own training steps, every replica given the same batch: [replica][step]."""
  hp = get_hparams("transformer_tiny", MICRO + ",layer_prepostprocess_dropout=0.5")
  trainer = train_loop.Trainer(hp, 32, f"{out}/masks", strategy)
  layer = trainer.model.embedding_dropout   # the sources' and the targets' ([3, 8] each)
  with strategy.scope():
    record = tf.Variable(tf.zeros([3, 8, 32]), trainable=False,
                         synchronization=tf.VariableSynchronization.ON_READ,
                         aggregation=tf.VariableAggregation.SUM)
  real_call = layer.call

  def call(inputs, training=None):
    outputs = real_call(inputs, training=training)
    if training:
      record.assign(tf.cast(tf.not_equal(outputs, 0), tf.float32))
    return outputs

  layer.call = call
  rng = np.random.default_rng(1)
  batch = {"inputs": rng.integers(2, 30, (3, 8)).astype("int32"),
           "targets": rng.integers(2, 30, (3, 8)).astype("int32")}
  masks = []
  for _ in range(2):
    trainer.train_step(strategy.experimental_distribute_values_from_function(lambda ctx: batch))
    masks.append([m.numpy().astype(int).tolist() for m in strategy.experimental_local_results(record)])
  return [list(steps) for steps in zip(*masks)]


def xla_compiled_functions(trainer):
  """How many functions marked for XLA compilation (`_XlaMustCompile`) the trainer's gradient
  pass traced; each traced one was called by a step, and TensorFlow compiles such a function
  with XLA or fails. 0 when the pass is a plain (uncompiled) function."""
  fn = trainer.gradients_fn
  if not hasattr(fn, "experimental_get_tracing_count"):
    return 0
  return sum(bool(f.function_def.attr["_XlaMustCompile"].b)
             for f in fn._list_all_concrete_functions_for_serialization())  # pylint: disable=protected-access


def micro_batches(replicas, updates=2, accumulation=2, rows=3):
  """[update][micro-batch][replica] -> batch, each with its own amount of target padding."""
  rng = np.random.default_rng(0)
  out = []
  for u in range(updates):
    out.append([])
    for m in range(accumulation):
      out[-1].append([])
      for r in range(replicas):
        batch = {"inputs": rng.integers(2, 30, (rows, 7)).astype("int32"),
                 "targets": rng.integers(2, 30, (rows, 9)).astype("int32")}
        batch["targets"][:, 9 - (u + 2 * m + 3 * r) % 6:] = 0
        batch["targets"][0, 9 - (u + m + r) % 4 - 1:] = 0
        out[-1][-1].append(batch)
  return out


def check_clipping_and_accumulation(strategy, out, more=False, ema=None):
  """One device on the whole global batch against N replicas accumulating 2 micro-batches,
  with clipping active (one device without clipping ends elsewhere) and weight_decay (its term
  counted once per update, not per replica or micro-batch): {"accumulated": ...}. With
  `more`, against the same one-device runs instead: "xla", N replicas accumulating that compile
  their forward and backward passes with XLA (`xla_compile`; the same accumulation, checked
  without XLA by the run without `more`); "no_accumulation", N replicas each given its share of
  the whole update at once; "rdrop", N replicas accumulating with R-Drop (rdrop_alpha=5), each
  replica doubling its own micro-batch: with no dropout the two copies agree and the KL term is
  0, so only a token count or a loss scale wrong across replicas (the doubled rows counted
  once, or per replica) moves it away from one device. (The 2-device process ran "accumulated"
  too until 2026-11-29: 11 s of its 30-s check, the same code as the 4-device process's run.)

  `ema`, with `more`: a dict filled with the arrays of "no_accumulation", which keeps a moving
  average (weight_ema_decay=EMA_DECAY; each replica given its own rows): its weights as built and
  after each update ("w<k>/<name>") and every replica's copy of the average ("ema<r>/<name>"),
  for tests/test_ema.py's NumPy EMA. The average changes no weight, so that run still ends where
  one device does (until 2026-11-29 the average had a trainer of its own, 6-8 s of the process)."""
  replicas = strategy.num_replicas_in_sync
  hp = get_hparams("transformer_tiny", MICRO + NO_DROPOUT + ",clip_grad_norm=0.3,"
                   "learning_rate_warmup_steps=4,weight_decay=0.05")
  one = train_loop.Trainer(hp, 32, f"{out}/one")
  unclipped = train_loop.Trainer(hp.replace(clip_grad_norm=0.0), 32, f"{out}/unclipped")
  if more:
    many = {"xla": train_loop.Trainer(hp.replace(gradient_accumulation_steps=2, xla_compile=True), 32,
                                      f"{out}/xla", strategy),
            "no_accumulation": train_loop.Trainer(hp.replace(weight_ema_decay=EMA_DECAY), 32,
                                                  f"{out}/no_accumulation", strategy),
            "rdrop": train_loop.Trainer(hp.replace(gradient_accumulation_steps=2, rdrop_alpha=5.0),
                                        32, f"{out}/rdrop", strategy)}
    averaged = many["no_accumulation"]
    averaged_variables = model_dir.checkpointable(averaged.model)
    ema.update({f"w0/{n}": averaged_variables[n].numpy() for n in averaged.ema})   # as built
  else:
    many = {"accumulated": train_loop.Trainer(hp.replace(gradient_accumulation_steps=2), 32,
                                              f"{out}/accumulated", strategy)}
  start = one.model.get_weights()
  for trainer in (unclipped, *many.values()):
    trainer.model.set_weights(start)
  losses = {name: [] for name in ("one", *many)}
  tokens = []
  reported = {name: [] for name in many}  # the target tokens each micro-batch's call returns

  def step(name, per_replica):
    loss, counted = many[name].train_step(strategy.experimental_distribute_values_from_function(
        lambda ctx: per_replica[ctx.replica_id_in_sync_group]))
    reported[name].append(float(counted))
    return float(loss)

  for update in micro_batches(replicas):
    whole = {k: np.concatenate([b[k] for micro in update for b in micro]) for k in ("inputs", "targets")}
    losses["one"].append(float(one.train_step(whole)[0]))
    unclipped.train_step(whole)
    accumulating = [name for name in ("accumulated", "xla", "rdrop") if name in many]
    for micro in update:
      tokens.append([int((b["targets"] != 0).sum()) for b in micro])
      last = {name: step(name, micro) for name in accumulating}
    for name in accumulating:  # the update's loss: what its last micro-batch's call returns
      losses[name].append(last[name])
    if "no_accumulation" in many:
      shares = [{k: np.concatenate([micro[r][k] for micro in update]) for k in ("inputs", "targets")}
                for r in range(replicas)]
      losses["no_accumulation"].append(step("no_accumulation", shares))
      ema.update({f"w{len(losses['no_accumulation'])}/{n}": averaged_variables[n].numpy()
                  for n in averaged.ema})

  if more:
    for n in averaged.ema:
      for r, value in enumerate(strategy.experimental_local_results(averaged.ema[n])):
        ema[f"ema{r}/{n}"] = value.numpy()

  def distance(a, b):
    return float(np.sqrt(sum(np.sum((x - y) ** 2) for x, y in zip(a, b))))
  moved = distance(one.model.get_weights(), start)
  # Relative to how far the weights moved: Adam turns float rounding in a gradient element
  # near 0 into a sign flip of its whole update (a few elements of ~20k differ by ~2 lr),
  # so an element-wise tolerance would test the rounding, not the algorithm.
  unclipped_apart = distance(unclipped.model.get_weights(), one.model.get_weights()) / moved
  return {name: {"losses": {"one": losses["one"], "many": losses[name]}, "tokens": tokens,
                 "reported_tokens": reported[name],
                 "steps": [one.step, trainer.step], "xla_compiled_functions": xla_compiled_functions(trainer),
                 "apart_over_moved": distance(trainer.model.get_weights(), one.model.get_weights()) / moved,
                 "unclipped_apart_over_moved": unclipped_apart}
          for name, trainer in many.items()}


def check_poisoned_gradient(strategy, out, value, replica, from_call):
  """Trains the poisoned model; returns whether it stopped, and what was saved."""
  POISON.update(value=value, replica=replica, from_call=from_call)
  hp = get_hparams("transformer_tiny", MICRO + ",clip_grad_norm=1.0")
  result = {"raised": None}
  try:
    train_loop.train_and_evaluate(get_problem("algorithmic_copy"), hp, out, None, train_steps=10,
                                  eval_steps=0, save_checkpoints_steps=2, log_every=10,
                                  strategy=strategy, model="transformer_poisoned_gradient")
  except train_loop.NonFiniteLossError as error:
    result["raised"] = str(error)
  return result


def check_whole_batch_per_replica(strategy, out):
  """train_and_evaluate's input under the strategy: its train_dataset_fn's batches are each
  replica's own (hparams batch_size is per replica, as in T2T), one whole batch per replica
  and step, so an update holds `replicas` batches. Batch k of the dataset has 4 (k + 1)
  target tokens; returns the tokens of each update. (A dataset distributed as global batches,
  split across the replicas, gives one batch's tokens per update; the same batch on every
  replica, `replicas` times one batch's.)"""
  replicas = strategy.num_replicas_in_sync
  targets = np.zeros([2 * replicas, 4, 2 * replicas], "int32")
  for k in range(2 * replicas):
    targets[k, :, :k + 1] = 3
  inputs = np.full([2 * replicas, 4, 5], 4, "int32")
  train_loop.train_and_evaluate(
      get_problem("algorithmic_copy"), get_hparams("transformer_tiny", MICRO), out, None,
      train_steps=2, eval_steps=0, save_checkpoints_steps=2, log_every=10, strategy=strategy,
      train_dataset_fn=lambda ctx: tf.data.Dataset.from_tensor_slices(
          {"inputs": inputs, "targets": targets}).repeat())
  return TRAINERS[-1].tokens_seen


def timed(name, fn, *args, **kwargs):
  """fn(*args, **kwargs), its seconds printed to stderr (what each check costs the suite)."""
  start = time.time()
  result = fn(*args, **kwargs)
  print(f"{name}: {time.time() - start:.1f} s", file=sys.stderr, flush=True)
  return result


def main():
  os.makedirs(OUT, exist_ok=True)
  if MODE == "mirrored":
    for n in DEVICES:
      strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(n)])
      out = f"{OUT}/{n}"
      ema = {}
      results = {"replicas": strategy.num_replicas_in_sync,
                 **timed(f"{n} devices, masks", check_masks, strategy, 0),
                 "clipping": timed(f"{n} devices, clipping (and the moving average on 2)",
                                   check_clipping_and_accumulation, strategy, f"{out}/clip",
                                   more=n == 2, ema=ema)}
      if n == 2:
        np.savez(f"{OUT}/ema-{n}.npz", **ema)
        # On 2 devices only (16 s of the 4-device process's 51, 2026-11-29): the Trainer's step
        # draws with the replica id that the layer checks above (on every count) fold in.
        results["trainer_masks"] = timed(f"{n} devices, trainer masks", trainer_masks, strategy, out)
        results["update_tokens"] = timed(f"{n} devices, a batch per replica",
                                         check_whole_batch_per_replica, strategy, f"{out}/batches")
        # Replica 1's gradient turns +inf (NaN: the workers' run; each poisoned run costs a trace).
        results["poisoned"] = timed(f"{n} devices, poisoned", check_poisoned_gradient, strategy,
                                    f"{out}/poisoned", float("inf"), 1, 4)
      with open(f"{OUT}/{MODE}-{n}.json", "w", encoding="utf-8") as f:
        json.dump(results, f)
  else:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    results = {"replicas": strategy.num_replicas_in_sync, **check_masks(strategy, INDEX),
               "trainer_masks": trainer_masks(strategy, OUT)}
    hp = get_hparams("transformer_tiny", MICRO + ",clip_grad_norm=0.5")  # dropout on
    # Every decision is the chief's. Its clock reads 10 s per update, worker 1's 100 s: a checkpoint
    # every 15 s is one at update 2 (and the last, 4) on the chief's clock, but one at every update
    # on worker 1's; a budget of 35 s ends the chief's run at update 4, worker 1's at 1. And a
    # patience on dev BLEU, which only the chief decodes (here a made-up score, evaluated at
    # update 3, between checkpoints, and at the last, 4): counted from update 3, it runs out at 4.
    # (Two evaluations, not one per update: each costs time.)
    clock = train_loop.time
    train_loop.time = FakeClock(10.0 if INDEX == 0 else 100.0)
    try:
      trained = train_loop.train_and_evaluate(
          get_problem("algorithmic_copy"), hp, f"{OUT}/run", None, train_steps=4, eval_steps=1,
          eval_every=3, save_checkpoints_secs=15, max_train_seconds=35, log_every=1,
          strategy=strategy, evaluate_fn=lambda model: {"bleu": SCORES[TRAINERS[-1].step]},
          early_stopping=best.EarlyStopping(patience=1, delta=0.5))
    finally:
      train_loop.time = clock
    results.update(step=trained["step"], stopped_early=trained.get("stopped_early"),
                   best_step=trained.get("best_step"), best_bleu=trained.get("best_bleu"))
    np.savez(f"{OUT}/weights-{INDEX}.npz", *TRAINERS[-1].model.get_weights())  # as held in memory
    results["poisoned"] = check_poisoned_gradient(strategy, f"{OUT}/poisoned", float("nan"), 1, 4)
    with open(f"{OUT}/{MODE}-{INDEX}.json", "w", encoding="utf-8") as f:
      json.dump(results, f)


if __name__ == "__main__":
  main()
