"""Choosing a `tf.distribute` strategy: one device, all local GPUs, several machines, or a TPU.

`batch_size` in hparams is per replica (T2T: per GPU), so the global batch grows with the number
of replicas. The paper trained on 8 GPUs x ~3k-4k tokens each (~25k source + ~25k target tokens
per step); to keep the same optimisation on fewer devices, use gradient accumulation
(`gradient_accumulation_steps = 8 / replicas`) rather than rescaling the learning rate. If the
global batch changes anyway, the usual rule is: learning rate proportional to sqrt(global batch)
and warmup in updates kept fixed (docs/training.md, "Devices").
"""

import json
import os

import tensorflow as tf

from t2t_lite import fast_path
from t2t_lite.graph_functions import graph_function


def make_strategy(worker_gpu=None, tpu=None):
  """Returns the strategy for this process.

  Args:
    worker_gpu: GPUs to use on this machine; None or 0 means all that are visible, 1 means one
      device (no mirroring).
    tpu: a TPU name or address; uses TPUStrategy.
  A `TF_CONFIG` naming more than one worker gives MultiWorkerMirroredStrategy.
  """
  if tpu:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)
  tf_config = json.loads(os.environ.get("TF_CONFIG", "{}") or "{}")
  workers = tf_config.get("cluster", {}).get("worker", [])
  if len(workers) + len(tf_config.get("cluster", {}).get("chief", [])) > 1:
    return tf.distribute.MultiWorkerMirroredStrategy()
  gpus = tf.config.list_logical_devices("GPU")
  if worker_gpu and worker_gpu > len(gpus) and worker_gpu > 1:
    raise ValueError(f"--worker_gpu={worker_gpu} but only {len(gpus)} GPU(s) are visible; "
                     "lower --worker_gpu or check CUDA_VISIBLE_DEVICES.")
  count = worker_gpu or len(gpus)
  if count > 1:
    return tf.distribute.MirroredStrategy([g.name for g in gpus[:count]])
  return tf.distribute.get_strategy()  # the default: one device


def check_supported(strategy, hparams):
  """Raises ValueError, saying what to set, for hparams `strategy` cannot train with.

  TPUStrategy compiles every step with XLA, which needs static shapes: the compacted loss
  (padded positions dropped, `xla_compile=false`) and batches of varying length do not have
  them. Other strategies take any hparams (`xla_compile` compiles each replica's forward and
  backward pass inside `strategy.run`; the all-reduce and the update run around it). "auto"
  values are checked as they resolve (`fast_path`: XLA under TPUStrategy).
  """
  hparams, _ = fast_path.resolve(hparams, strategy)
  if (isinstance(strategy, fast_path.TPU_STRATEGIES)
      and not (hparams.xla_compile and hparams.static_batch_shapes)):
    raise ValueError(
        "TPUStrategy compiles every step with XLA and needs static shapes: add "
        "xla_compile=true,static_batch_shapes=true to --hparams (the loss then keeps padded "
        "positions instead of compacting them, and every batch is padded to max_length)")


def is_chief(strategy):
  """True on the process that owns the output directory."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not getattr(resolver, "task_type", None):
    return True
  return resolver.task_type == "chief" or (
      resolver.task_type == "worker" and resolver.task_id == 0 and
      "chief" not in resolver.cluster_spec().as_dict())


class ChiefDecisions:
  """Decisions the chief takes and every worker follows (MultiWorkerMirroredStrategy).

  Each training step's collectives wait for every worker, so all of them must stop, save and
  evaluate at the same updates. A worker's own clock (a time budget, checkpoints every N seconds)
  runs apart from the chief's, and only the chief evaluates (its dev BLEU, its best/): a decision
  taken from those on each worker could differ, leaving one waiting for another that stopped or
  moved on. `share` gives every worker the chief's values instead: one all-reduce of a few
  numbers to which only the chief contributes (its first replica; every other replica adds
  zeros, so the sum is the chief's values exactly). With any other strategy (one process) it
  returns the values as they are, without communication.
  """
  SIZE = 2  # values per call: one traced program for every call

  def __init__(self, strategy: tf.distribute.Strategy):
    self.strategy = strategy
    self.chief = is_chief(strategy)
    self.several = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    self._all_reduce = None

  def share(self, *values: float) -> tuple[float, ...]:
    """The chief's `values` (at most SIZE numbers: flags, steps), the same on every worker.
    Every worker must call it at the same points, as it does each step's collectives."""
    if len(values) > self.SIZE:
      raise ValueError(f"at most {self.SIZE} values at a time, got {len(values)}")
    if not self.several:
      return tuple(values)
    if self._all_reduce is None:
      self._all_reduce = graph_function(self._sum_of_the_chiefs,
                                        input_signature=[tf.TensorSpec([self.SIZE], tf.float64)])
    mine = [float(v) for v in values] + [0.0] * (self.SIZE - len(values))
    shared = self._all_reduce(tf.constant(mine if self.chief else [0.0] * self.SIZE, tf.float64))
    return tuple(float(v) for v in shared.numpy()[:len(values)])

  def _sum_of_the_chiefs(self, mine):
    given = []

    def value(context):  # this worker's first replica gives `mine` (zeros off the chief)
      del context
      given.append(True)
      return mine if len(given) == 1 else tf.zeros_like(mine)

    per_replica = self.strategy.experimental_distribute_values_from_function(value)
    return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
