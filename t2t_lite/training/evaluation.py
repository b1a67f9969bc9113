"""Evaluation: dev loss, NLL and perplexity of a model, during training or of saved checkpoints.

`evaluate` is what the trainer runs at each evaluation; `evaluate_checkpoints` is T2T's
`evaluate` and `continuous_eval` schedules: a process of its own evaluates the model directory's
newest checkpoint, or every new checkpoint as training writes them, while another trains with
`--schedule=train`. Metrics go to TensorBoard in OUTPUT_DIR/eval, as the trainer writes them.
"""

import math
import os
from collections.abc import Callable

import keras
import tensorflow as tf

from t2t_lite import model_dir
from t2t_lite.problems import Problem
from t2t_lite.training.loss import fast_smoothed_cross_entropy
from t2t_lite.graph_functions import batch_function


def eval_step_fn(model: keras.Model, label_smoothing: float, batch_spec=None):
  """`fn(batch) -> (label-smoothed loss sum, target tokens, NLL sum)`, a graph built once
  (later evaluations reuse its traces). Given the eval dataset's `element_spec` as `batch_spec`,
  it is traced once for every batch shape the dataset makes (and refuses batches of another
  structure or dtype); without, once for the first shape and again, relaxed, for the next."""
  def eval_step(batch):
    logits = model(batch, training=False)
    return fast_smoothed_cross_entropy(logits, batch["targets"], label_smoothing)
  return batch_function(eval_step, batch_spec)


def evaluate(step_fn, dataset: tf.data.Dataset, max_batches: int | None = None) -> dict:
  """Dev loss (label-smoothed, per token), unsmoothed per-token NLL and perplexity."""
  loss = tokens = nll = 0.0
  for i, batch in enumerate(dataset):
    if max_batches and i >= max_batches:
      break
    l, n, x = (float(v) for v in step_fn(batch))
    loss, tokens, nll = loss + l, tokens + n, nll + x
  tokens = max(tokens, 1.0)
  return {"loss": loss / tokens, "nll": nll / tokens, "perplexity": math.exp(min(nll / tokens, 50))}


def write_scalars(writer, step, values):
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


def checkpoint_step(path: str) -> int:
  """The step of a checkpoint prefix `.../ckpt-1200`."""
  return int(path.rsplit("-", 1)[-1])


def evaluate_checkpoints(problem: Problem, output_dir: str, data_dir: str | None = None,
                         eval_steps: int = 100, split: str = "dev",
                         evaluate_fn: Callable[[keras.Model], dict[str, float]] | None = None,
                         continuous: bool = False, train_steps: int | None = None,
                         timeout_minutes: float = 240,
                         summary_name: str = "eval") -> dict[str, float]:
  """Evaluates the newest checkpoint of `output_dir` on `split`, or (`continuous`) every new
  checkpoint as it appears, until one reaches `train_steps` or none comes for
  `timeout_minutes` (T2T's continuous_eval with --eval_timeout_mins). Prints each evaluation and
  writes it to OUTPUT_DIR/`summary_name`; returns the last one (with its "step")."""
  hparams, model = model_dir.build_recorded_model(output_dir)
  dataset = problem.dataset(split, data_dir, hparams, training=False)  # read again at each checkpoint
  step_fn = eval_step_fn(model, hparams.label_smoothing, dataset.element_spec)
  writer = tf.summary.create_file_writer(os.path.join(output_dir, summary_name))
  if continuous:
    paths = tf.train.checkpoints_iterator(output_dir, timeout=timeout_minutes * 60)
  else:
    latest = tf.train.latest_checkpoint(output_dir)
    if not latest:
      raise model_dir.ModelDirError(f"{output_dir} has no checkpoint to evaluate; train first")
    paths = [latest]
  results = {}
  for path in paths:
    model_dir.restore_weights(model, path)  # the moving averages of the weights when it has them
    step = checkpoint_step(path)
    results = evaluate(step_fn, dataset, eval_steps)
    if evaluate_fn is not None:
      results.update(evaluate_fn(model))
    write_scalars(writer, step, results)
    print(f"eval of {os.path.basename(path)} on {split}: " +
          ", ".join(f"{k} {v:.4f}" for k, v in results.items()), flush=True)
    results["step"] = step
    if continuous and train_steps and step >= train_steps:
      break
  return results
