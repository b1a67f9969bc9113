"""Checkpoint averaging (paper section 6.1: the last 5 checkpoints for base, 20 for big).

Reads the model variables of N checkpoints, writes their element-wise mean as a new checkpoint
(through CheckpointManager, so the output directory's `checkpoint` index names it and
`--checkpoint_path` or `tf.train.latest_checkpoint` finds it). Optimizer slots are not averaged:
the result is for decoding and export. Checkpoints trained with weight_ema_decay > 0 contribute
their moving averages (what they decode with). `window_ending_at_best` picks the window that
ends at OUTPUT_DIR/best instead of at the last checkpoint.
"""

import os
import shutil
import time

import numpy as np
import tensorflow as tf

from t2t_lite import model_dir


def last_checkpoints(output_dir: str, count: int) -> list[str]:
  """The newest `count` checkpoint prefixes of `output_dir`, oldest first."""
  state = tf.train.get_checkpoint_state(output_dir)
  paths = list(state.all_model_checkpoint_paths) if state else []
  if not paths:
    raise model_dir.ModelDirError(f"{output_dir} has no checkpoints to average; train first.")
  if len(paths) < count:
    print(f"warning: asked to average {count} checkpoints but {output_dir} keeps {len(paths)}; "
          f"averaging those {len(paths)}", flush=True)
  return paths[-count:]


def window_ending_at_best(output_dir: str, count: int) -> list[str]:
  """The `count` checkpoints ending at OUTPUT_DIR/best's (its own copy, then the newest kept ones
  before its step), oldest first: averaging around the best evaluation rather than the last."""
  from t2t_lite.training.best import read_best  # pylint: disable=import-outside-toplevel
  best = read_best(output_dir)
  if best is None:
    raise model_dir.ModelDirError(f"{output_dir} has no best/ checkpoint: train with evaluations "
                                  "(--eval_steps > 0) to keep one")
  state = tf.train.get_checkpoint_state(output_dir)
  before = [p for p in (state.all_model_checkpoint_paths if state else [])
            if checkpoint_step(p) < best["step"]]
  if len(before) < count - 1:
    print(f"warning: asked to average {count} checkpoints ending at the best (step {best['step']}) "
          f"but {output_dir} keeps {len(before)} before it; averaging {len(before) + 1}", flush=True)
  return before[len(before) - (count - 1):] + [best["checkpoint"]] if count > 1 else [best["checkpoint"]]


def average_checkpoints(output_dir: str, out_dir: str, count: int = 5,
                        checkpoint_paths: list[str] | None = None,
                        checkpoint_name: str = "averaged") -> str:
  """Averages the last `count` checkpoints of `output_dir` into `out_dir`; returns the new prefix
  (`out_dir/<checkpoint_name>-<step of the newest averaged checkpoint>`).

  `out_dir` becomes a model directory of its own (hparams.json and vocab copied), so the decoder
  and exporter can take it as `--output_dir` too.
  """
  paths = checkpoint_paths or last_checkpoints(output_dir, count)
  problem_name, _ = model_dir.read_model_dir(output_dir)
  _, model = model_dir.build_recorded_model(output_dir)
  checkpoint = tf.train.Checkpoint(model=model_dir.checkpointable(model))
  sums = [np.zeros(v.shape, np.float64) for v in model.weights]
  for path in paths:
    model_dir.restore_weights(model, path)  # a checkpoint's moving averages when it has them
    for total, variable in zip(sums, model.weights):
      total += np.asarray(variable.numpy(), np.float64)
  for total, variable in zip(sums, model.weights):
    variable.assign((total / len(paths)).astype(variable.dtype))
  os.makedirs(out_dir, exist_ok=True)
  if os.path.abspath(output_dir) != os.path.abspath(out_dir):
    for name in (model_dir.HPARAMS_FILE, model_dir.FLAGS_FILE, model_dir.VOCAB_FILE):
      if os.path.exists(os.path.join(output_dir, name)):
        shutil.copyfile(os.path.join(output_dir, name), os.path.join(out_dir, name))
  step = int(paths[-1].rsplit("-", 1)[-1]) if paths[-1].rsplit("-", 1)[-1].isdigit() else None
  manager = tf.train.CheckpointManager(checkpoint, out_dir, max_to_keep=None,
                                       checkpoint_name=checkpoint_name)
  prefix = manager.save(checkpoint_number=step)
  print(f"averaged {len(paths)} checkpoints of {problem_name} "
        f"({', '.join(os.path.basename(p) for p in paths)}) into {prefix}", flush=True)
  return prefix


def checkpoint_step(path: str) -> int:
  """The step of a checkpoint prefix `.../ckpt-1200` (its number)."""
  return int(path.rsplit("-", 1)[-1])


def average_all(output_dir: str, out_dir: str, count: int = 8, min_steps: int = 0,
                wait_minutes: float = 0, poll_seconds: float = 10) -> list[str]:
  """T2T's t2t-avg-all: for every checkpoint of `output_dir` (steps >= `min_steps`, in order)
  that has `count` checkpoints up to it, writes their average as `out_dir/model.ckpt-<step>`;
  then waits up to `wait_minutes` for new checkpoints (training still running), and stops when
  none came. Windows already averaged in `out_dir` are skipped. Returns the prefixes written."""
  written, done = [], set()
  state = tf.train.get_checkpoint_state(out_dir) if os.path.isdir(out_dir) else None
  done.update(checkpoint_step(p) for p in (state.all_model_checkpoint_paths if state else []))
  deadline = time.time() + wait_minutes * 60
  while True:
    state = tf.train.get_checkpoint_state(output_dir)
    paths = sorted((p for p in (state.all_model_checkpoint_paths if state else [])
                    if checkpoint_step(p) >= min_steps), key=checkpoint_step)
    new = [i for i in range(count - 1, len(paths)) if checkpoint_step(paths[i]) not in done]
    for i in new:
      written.append(average_checkpoints(output_dir, out_dir, count, paths[i - count + 1:i + 1],
                                         checkpoint_name="model.ckpt"))
      done.add(checkpoint_step(paths[i]))
    if new:
      deadline = time.time() + wait_minutes * 60
    if time.time() >= deadline:
      return written
    time.sleep(poll_seconds)
