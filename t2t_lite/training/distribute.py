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
