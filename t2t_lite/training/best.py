"""Keep the best checkpoint, stop early (T2T's --eval_early_stopping_*, Keras' EarlyStopping).

At each evaluation the trainer asks `BestKeeper.update` whether the evaluation's metric beats
the best so far. If so, the whole checkpoint (weights, their moving averages, optimizer) becomes
OUTPUT_DIR/best, a model directory of its own that the decoder, exporter and averaging take as it
is. Any improvement counts there, as in T2T's BestExporter, OpenNMT-tf's `export_on_best` and
fairseq's checkpoint_best. An evaluation whose metric is NaN or infinite is never the best (nor
does a NaN kept by an older run block every later one):

    OUTPUT_DIR/best -> .best-<step>     a symbolic link, replaced atomically
    OUTPUT_DIR/.best-<step>/            hparams.json, flags.txt, vocab.model, checkpoint,
                                        ckpt-<step>.*, best.json {"metric", "value", "step", ...}

The new directory is written completely under a temporary name first, then the link is swapped
with one rename, so a kill at any moment leaves `best` pointing at a complete directory: the old
best, or the new one. It lies outside the rolling `keep_checkpoint_max` window. When the trainer
has just saved the same weights as its regular checkpoint of that step (evaluations at
checkpoint steps, the default), best/ hard-links those files instead of writing the checkpoint
a second time (see `write_best`).

With a patience (`EarlyStopping.patience`, in updates: T2T's --eval_early_stopping_steps),
`should_stop` is true once that many updates have passed without an evaluation that improved by
more than `delta` (T2T's --eval_early_stopping_metric_delta, OpenNMT-tf's `min_improvement`,
Keras' `min_delta`) on the one the patience counts from: each such evaluation restarts the
count; smaller improvements still become best/ but do not. (T2T's plateau test and OpenNMT-tf
compare with the evaluation `patience` back, this one with the last that counted, as Keras'
EarlyStopping does; either way, improvements that add up to more than `delta` within the
patience keep training going. Keras also keeps its best weights only on such improvements.)
"""

import dataclasses
import json
import math
import os
import shutil
import tempfile

import tensorflow as tf

from t2t_lite import model_dir

# Metrics where larger is better; any other (loss, nll, perplexity) is minimized by default.
LARGER_IS_BETTER = ("bleu", "accuracy")


@dataclasses.dataclass(frozen=True)
class EarlyStopping:
  """What counts as the best evaluation and when to stop (T2T's --eval_early_stopping_* flags).

  metric: an evaluation's name ("loss", "nll", "perplexity", "bleu"); None: "bleu" where the
    evaluations compute it (the trainer decodes dev BLEU), else "loss".
  minimize: None: False for BLEU, True for the losses.
  patience: stop after this many updates without an improvement; None: never stop early (the
    best checkpoint is still kept).
  delta: for the patience, an improvement must exceed this (T2T's default 0.1); best/ takes
    any improvement.
  """
  metric: str | None = None
  minimize: bool | None = None
  patience: int | None = None
  delta: float = 0.1

  def __post_init__(self):
    if self.patience is not None and self.patience <= 0:
      raise ValueError(f"--eval_early_stopping_steps must be > 0, got {self.patience}")
    if self.delta < 0:
      raise ValueError(f"--eval_early_stopping_metric_delta must be >= 0, got {self.delta}")

  def resolve(self, results: dict) -> tuple[str, bool]:
    """(metric name, minimize) for evaluations like `results`."""
    metric = self.metric or ("bleu" if "bleu" in results else "loss")
    if metric not in results:
      raise ValueError(f"--eval_early_stopping_metric={metric}: the evaluations compute "
                       f"{', '.join(sorted(results))}; pick one of those")
    minimize = self.minimize if self.minimize is not None else not any(
        name in metric for name in LARGER_IS_BETTER)
    return metric, minimize


def best_dir(output_dir: str) -> str:
  return os.path.join(output_dir, model_dir.BEST_DIR)


def read_best(output_dir: str) -> dict | None:
  """OUTPUT_DIR/best/best.json ({"metric", "value", "step", "minimize", "checkpoint", "results",
  "patience_from": {"step", "value"}}), or None."""
  path = os.path.join(best_dir(output_dir), model_dir.BEST_FILE)
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    record = json.load(f)
  record["checkpoint"] = os.path.join(best_dir(output_dir), record["checkpoint"])
  return record


def _link_checkpoint(prefix: str, directory: str) -> str:
  """Hard-links checkpoint `prefix`'s files (.index, .data-*) into `directory` (copies them where
  links fail: another file system, one without links) with TensorFlow's `checkpoint` state file
  naming it (relative to `directory`); returns the new prefix.

  Why a link is safe: TensorFlow writes every checkpoint file under a temporary name and renames
  it, and never writes into a finished one, so the regular checkpoint and best/ share contents
  that no one changes; when the rolling window deletes the regular ckpt-N, only its name goes and
  best/'s link keeps the data. Linking costs no disk space and no second write of the weights
  and Adam's moments (3 x the model) at every new best.
  """
  name = os.path.basename(prefix)
  files = tf.io.gfile.glob(prefix + ".*")  # ckpt-4.* does not match ckpt-40.*
  if not any(f.endswith(".index") for f in files):
    raise FileNotFoundError(f"no checkpoint {prefix} (.index) to keep as best/")
  for path in files:
    target = os.path.join(directory, os.path.basename(path))
    try:
      os.link(path, target)
    except OSError:
      shutil.copy2(path, target)
  prefix = os.path.join(directory, name)
  # TensorFlow's `checkpoint` state file, written atomically by the call CheckpointManager makes
  # for its own: the path relative to `directory`, which is renamed after this. (The public
  # tf.compat.v1.train.update_checkpoint_state is deprecated and keeps an absolute path absolute.)
  tf.__internal__.train.update_checkpoint_state(
      directory, prefix, all_model_checkpoint_paths=[prefix], save_relative_paths=True)
  return prefix


def write_best(output_dir: str, checkpoint: tf.train.Checkpoint, step: int, record: dict,
               saved: str | None = None) -> str:
  """Saves `checkpoint` as OUTPUT_DIR/best (see the module doc); returns its checkpoint prefix.

  saved: the prefix of a checkpoint already on disk that holds exactly `checkpoint`'s state at
    `step` (the regular checkpoint the trainer has just saved): its files are linked into best/
    (`_link_checkpoint`) instead of saving the checkpoint again. Either way best/ is complete
    before the one atomic step that makes it the best.
  """
  tmp = tempfile.mkdtemp(dir=output_dir, prefix=".tmp-best-")
  try:
    model_dir.give_default_mode(tmp)
    if saved:
      prefix = _link_checkpoint(saved, tmp)
    else:
      prefix = tf.train.CheckpointManager(checkpoint, tmp, max_to_keep=1).save(checkpoint_number=step)
    for name in (model_dir.HPARAMS_FILE, model_dir.FLAGS_FILE, model_dir.VOCAB_FILE):
      if os.path.exists(os.path.join(output_dir, name)):
        shutil.copyfile(os.path.join(output_dir, name), os.path.join(tmp, name))
    record = dict(record, step=step, checkpoint=os.path.basename(prefix))
    model_dir.atomic_write(os.path.join(tmp, model_dir.BEST_FILE),
                           json.dumps(record, indent=2, sort_keys=True) + "\n")
    for name in os.listdir(tmp):  # on disk before the link can name the directory
      with open(os.path.join(tmp, name), "rb") as f:
        os.fsync(f.fileno())
    version = f".best-{step}"
    target = os.path.join(output_dir, version)
    if os.path.exists(target):  # a kill after the rename below, before the link: redo it
      shutil.rmtree(target)
    os.rename(tmp, target)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  link = os.path.join(output_dir, f".tmp-best-link-{os.getpid()}")
  if os.path.lexists(link):
    os.remove(link)
  os.symlink(version, link)
  os.replace(link, best_dir(output_dir))  # the one atomic step
  for name in os.listdir(output_dir):  # older bests and leftovers of a kill
    if (name.startswith(".best-") and name != version) or name.startswith(".tmp-best-"):
      shutil.rmtree(os.path.join(output_dir, name), ignore_errors=True)
  return os.path.join(best_dir(output_dir), os.path.basename(prefix))


class BestKeeper:
  """The best evaluation so far, and the one the patience counts from (both continued from
  OUTPUT_DIR/best when training resumes)."""

  def __init__(self, output_dir: str, settings: EarlyStopping | None = None, write: bool = True):
    self.output_dir = output_dir
    self.settings = settings or EarlyStopping()
    self.write = write  # False: the record stays in memory (nothing written)
    self.best = read_best(output_dir)

  @property
  def patience_from(self) -> dict | None:
    """{"step", "value"}: the last evaluation that improved by more than `delta` on the one
    before it that did (the first evaluation counts); None before any."""
    if self.best is None:
      return None
    return self.best.get("patience_from") or {"step": self.best["step"], "value": self.best["value"]}

  def update(self, step: int, results: dict, checkpoint: tf.train.Checkpoint,
             saved: str | None = None) -> bool:
    """Keeps this evaluation's `checkpoint` as the best if it improved on the best at all; moves
    the patience's start here if it improved by more than `delta` on the evaluation the patience
    counts from (such an evaluation is always a new best too). Returns whether it is the best.
    `saved`: the checkpoint of this step just saved with the same state (see `write_best`)."""
    metric, minimize = self.settings.resolve(results)
    value = float(results[metric])
    if not math.isfinite(value):  # a NaN kept as the best would never be beaten
      return False

    def gain(old):
      return old - value if minimize else value - old

    fresh = (self.best is None or self.best["metric"] != metric
             or not math.isfinite(self.best["value"]))
    if not fresh and gain(self.best["value"]) <= 0:
      return False
    start = self.patience_from
    if fresh or gain(start["value"]) > self.settings.delta:
      start = {"step": step, "value": value}
    record = {"metric": metric, "value": value, "minimize": minimize, "patience_from": start,
              "results": {k: float(v) for k, v in results.items()}}
    path = write_best(self.output_dir, checkpoint, step, record, saved) if self.write else None
    self.best = dict(record, step=step, checkpoint=path)
    return True

  def should_stop(self, step: int) -> bool:
    patience = self.settings.patience
    return patience is not None and self.best is not None and (
        step - self.patience_from["step"] >= patience)
