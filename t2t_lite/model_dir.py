"""The model directory: `hparams.json` (resolved hparams, problem and flags), checkpoints, vocab.

Every command after the trainer reads the hparams from here, so overrides are never lost
(T2T issue #672). Files are written to a temporary name and renamed, so a kill never leaves a
half-written file.
"""

import json
import os
import shutil
import tempfile

from t2t_lite.hparams import HParams

HPARAMS_FILE = "hparams.json"
FLAGS_FILE = "flags.txt"
VOCAB_FILE = "vocab.model"


class ModelDirError(ValueError):
  """A model directory that is missing pieces or was made with other settings."""


def atomic_write(path, data):
  """Writes `data` (str or bytes) to `path` through a temporary file and a rename."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-" + os.path.basename(path))
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data.encode("utf-8") if isinstance(data, str) else data)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def write_model_dir(output_dir, hparams, problem_name, flags=None, vocab_size=None, overwrite=False):
  """Records what the model in `output_dir` is; refuses a directory trained with other hparams.

  Raises:
    ModelDirError: `output_dir` holds a model with different hparams or problem and `overwrite`
      is false.
  """
  path = os.path.join(output_dir, HPARAMS_FILE)
  if os.path.exists(path) and not overwrite:
    old_problem, old = read_model_dir(output_dir)
    if old != hparams or old_problem != problem_name:
      old_d, new_d = json.loads(old.to_json()), json.loads(hparams.to_json())
      diff = {k: (old_d[k], new_d[k]) for k in new_d if old_d[k] != new_d[k]}
      if old_problem != problem_name:
        diff["problem"] = (old_problem, problem_name)
      raise ModelDirError(
          f"{output_dir} holds a model trained with other settings (old, new): {diff}. "
          "Use another --output_dir, or pass --overwrite_output_dir to start over there.")
  if overwrite and os.path.isdir(output_dir):
    for name in os.listdir(output_dir):
      target = os.path.join(output_dir, name)
      shutil.rmtree(target) if os.path.isdir(target) else os.remove(target)
  record = {"problem": problem_name, "hparams": json.loads(hparams.to_json()), "flags": flags or {},
            "vocab_size": vocab_size}
  atomic_write(path, json.dumps(record, indent=2, sort_keys=True) + "\n")
  if flags:
    atomic_write(os.path.join(output_dir, FLAGS_FILE),
                 "".join(f"--{k}={v}\n" for k, v in sorted(flags.items())))


def read_model_dir(output_dir):
  """Returns (problem_name, HParams) recorded in `output_dir`."""
  path = os.path.join(output_dir, HPARAMS_FILE)
  if not os.path.exists(path):
    raise ModelDirError(f"{output_dir} has no {HPARAMS_FILE}: it is not a t2t_lite model directory. "
                        "Point --output_dir at the directory t2t-lite-trainer wrote.")
  with open(path, encoding="utf-8") as f:
    record = json.load(f)
  return record["problem"], HParams.from_json(json.dumps(record["hparams"]))


def read_record(output_dir):
  """The whole record: problem, hparams (as a dict), flags, vocab_size."""
  read_model_dir(output_dir)  # clear error if missing
  with open(os.path.join(output_dir, HPARAMS_FILE), encoding="utf-8") as f:
    return json.load(f)
