"""The model directory: one folder that says what a trained model is, and the one place that
builds, restores and describes it. Training writes it; decoding, averaging, export and the
attention pictures read it, all through this module.

    OUTPUT_DIR/hparams.json         problem, model name, hparams (set and overrides resolved,
                                    "auto" kept), flags, vocabulary size, and the training path
                                    the last run took (precision and XLA, `fast_path`)
    OUTPUT_DIR/flags.txt            the trainer's flags, one `--name=value` a line
    OUTPUT_DIR/vocab.model          the vocabulary (`t2t_lite.data.vocab.vocab_from_proto` reads it)
    OUTPUT_DIR/checkpoint, ckpt-N.* checkpoints: every model variable under its Keras path (and,
                                    with hparams weight_ema_decay > 0, their moving averages)
    OUTPUT_DIR/best/                the best evaluation's checkpoint (a model directory of its
                                    own, with best.json: metric, value, step)
    OUTPUT_DIR/xla_cache/           the search programs the decoder and the server compiled
                                    (t2t_lite/decoding/xla_cache.py; delete it at any time)

Every command after the trainer reads the hparams from here, so overrides are never lost
(T2T issue #672). Files are written to a temporary name and renamed, so a kill never leaves a
half-written file.
"""

import contextlib
import dataclasses
import json
import os
import re
import shutil
import sys
import tempfile
import zipfile

import keras
import numpy as np
import tensorflow as tf

from t2t_lite import fast_path
from t2t_lite import models  # noqa: F401  (registers the models in registry.models)
from t2t_lite import registry
from t2t_lite.data import vocab as vocab_lib
from t2t_lite.hparams import DecodeHParams, HParams
from t2t_lite.problems import Problem, VocabProblem, get_problem

HPARAMS_FILE = "hparams.json"
FLAGS_FILE = "flags.txt"
VOCAB_FILE = "vocab.model"
DEFAULT_MODEL = "transformer"  # a name in `registry.models` (the trainer's --model)
BEST_DIR = "best"      # OUTPUT_DIR/best: the best evaluation's checkpoint
BEST_FILE = "best.json"
EMA_ROOT = "ema"       # a checkpoint's moving averages of the weights (hparams weight_ema_decay)
KERAS_RECORD = "t2t_lite.json"        # inside a .keras file: this directory's hparams.json
KERAS_VOCAB = "t2t_lite_vocab.model"  # inside a .keras file: the vocabulary


class ModelDirError(ValueError):
  """A model directory that is missing pieces or was made with other settings."""


def _umask() -> int:
  """The process's umask: from /proc (Linux), else by setting and restoring it."""
  try:
    with open("/proc/self/status", encoding="ascii") as f:
      for line in f:
        if line.startswith("Umask:"):
          return int(line.split()[1], 8)
  except (OSError, ValueError):
    pass
  mask = os.umask(0o022)
  os.umask(mask)
  return mask


def give_default_mode(path: str) -> None:
  """Gives a file or folder made by `tempfile` (mode 0600 or 0700) the mode `open` or `os.mkdir`
  would have given it (0666 or 0777 less the umask: 0644 and 0755 under the usual 022), so that a
  model directory, an export or a translation written through a temporary name and a rename is
  readable by whoever the umask lets read the user's other files (a server's account, a
  colleague, TF Serving in a container)."""
  os.chmod(path, (0o777 if os.path.isdir(path) else 0o666) & ~_umask())


def atomic_write(path: str, data: str | bytes) -> None:
  """Writes `data` (str or bytes) to `path` through a temporary file and a rename; the file gets
  the mode `open` would give it (`give_default_mode`)."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-" + os.path.basename(path))
  try:
    give_default_mode(tmp)
    with os.fdopen(fd, "wb") as f:
      f.write(data.encode("utf-8") if isinstance(data, str) else data)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


# --- hparams.json, flags.txt, vocab.model. --------------------------------------------------------


def write_model_dir(output_dir: str, hparams: HParams, problem_name: str, flags: dict | None = None,
                    vocab_size: int | None = None, overwrite: bool = False,
                    model: str = DEFAULT_MODEL, training_path: dict | None = None) -> None:
  """Records what the model in `output_dir` is; refuses a directory trained with other settings.

  `training_path`: the precision and XLA the trainer's run took (`fast_path.TrainingPath.record`),
  kept as the record's `training_path` (the last run's, when a run resumes).

  Raises:
    ModelDirError: `output_dir` holds a model with different hparams, problem or model and
      `overwrite` is false.
  """
  path = os.path.join(output_dir, HPARAMS_FILE)
  if os.path.exists(path) and not overwrite:
    old_problem, old = read_model_dir(output_dir)
    old_model = read_record(output_dir).get("model", DEFAULT_MODEL)
    if old != hparams or old_problem != problem_name or old_model != model:
      old_d, new_d = json.loads(old.to_json()), json.loads(hparams.to_json())
      diff = {k: (old_d[k], new_d[k]) for k in new_d if old_d[k] != new_d[k]}
      if old_problem != problem_name:
        diff["problem"] = (old_problem, problem_name)
      if old_model != model:
        diff["model"] = (old_model, model)
      resume = ""
      if set(diff) <= {"mixed_precision", "xla_compile"}:  # the training path only (fast_path)
        recorded = ",".join(f"{k}={str(old).lower()}" for k, (old, _) in sorted(diff.items()))
        resume = f" To continue that training as it ran, add {recorded} to --hparams."
      raise ModelDirError(
          f"{output_dir} holds a model trained with other settings (old, new): {diff}. "
          "Use another --output_dir, or pass --overwrite_output_dir to start over there." + resume)
  if overwrite and os.path.isdir(output_dir):
    for name in os.listdir(output_dir):
      target = os.path.join(output_dir, name)
      if os.path.isdir(target) and not os.path.islink(target):  # OUTPUT_DIR/best is a link
        shutil.rmtree(target)
      else:
        os.remove(target)
  record = {"problem": problem_name, "model": model, "hparams": json.loads(hparams.to_json()),
            "flags": flags or {}, "vocab_size": vocab_size}
  if training_path is not None:
    record["training_path"] = training_path
  atomic_write(path, json.dumps(record, indent=2, sort_keys=True) + "\n")
  if flags:
    atomic_write(os.path.join(output_dir, FLAGS_FILE),
                 "".join(f"--{k}={v}\n" for k, v in sorted(flags.items())))


def read_record(output_dir: str) -> dict:
  """The whole record: problem, model, hparams (as a dict), flags, vocab_size."""
  path = os.path.join(output_dir, HPARAMS_FILE)
  if not os.path.exists(path):
    raise ModelDirError(f"{output_dir} has no {HPARAMS_FILE}: it is not a t2t_lite model directory. "
                        "Point --output_dir at the directory t2t-lite-trainer wrote.")
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def read_model_dir(output_dir: str) -> tuple[str, HParams]:
  """Returns (problem_name, HParams) recorded in `output_dir`."""
  record = read_record(output_dir)
  return record["problem"], HParams.from_json(json.dumps(record["hparams"]))


def saved_hparams(output_dir: str) -> HParams | None:
  """The hparams recorded in `output_dir`, or None when it holds no model yet."""
  if not os.path.exists(os.path.join(output_dir, HPARAMS_FILE)):
    return None
  return read_model_dir(output_dir)[1]


def with_saved_vocab(problem: Problem, output_dir: str) -> Problem:
  """`problem` tokenized with the vocabulary saved in `output_dir` when there is one (a run in a
  trained or imported model's directory keeps that model's ids), else `problem` itself."""
  if not os.path.exists(os.path.join(output_dir, VOCAB_FILE)):
    return problem
  return VocabProblem(problem, vocab_lib.SubwordVocab.from_file(os.path.join(output_dir, VOCAB_FILE)))


def write_vocab(output_dir: str, vocab) -> None:
  """Saves the vocabulary as `vocab.model` (once), so the directory is self-contained."""
  path = os.path.join(output_dir, VOCAB_FILE)
  proto = getattr(vocab, "model_proto", None)
  if proto and not os.path.exists(path):
    atomic_write(path, proto)


def load_vocab(output_dir: str):
  """The vocabulary saved in the model directory (or, when it has none, its problem's)."""
  path = os.path.join(output_dir, VOCAB_FILE)
  record = read_record(output_dir)
  if os.path.exists(path):
    return vocab_lib.SubwordVocab.from_file(path)
  flags = record.get("flags", {})
  problem = get_problem(record["problem"], raw_data_dir=flags.get("raw_data_dir"))
  return problem.get_vocab(flags.get("data_dir"))


# --- The problem's decoding defaults. -------------------------------------------------------------


def find_problem(problem_name: str) -> Problem | None:
  """The model's problem, or None (with a warning) if its registration is not loaded here; None
  without a warning for a model that records none (an imported one)."""
  if not problem_name:
    return None
  try:
    return get_problem(problem_name)
  except registry.RegistryError:
    print(f"warning: problem {problem_name!r} is not registered here (missing --t2t_usr_dir?); "
          "using the paper's decoding defaults", file=sys.stderr)
    return None


def decode_defaults(problem: Problem | None) -> DecodeHParams:
  """The problem's decoding settings (e.g. beam 21 for parsing), or the paper's without one."""
  return problem.default_decode_hparams() if problem is not None else DecodeHParams()


def model_decode_defaults(output_dir: str) -> DecodeHParams:
  """`decode_defaults` of the problem the model in `output_dir` records."""
  return decode_defaults(find_problem(read_record(output_dir)["problem"]))


def decode_constraint(output_dir: str, vocab, decode_hparams: DecodeHParams):
  """The decoding constraint of the model's problem (parsing: only well-formed trees over the
  input), or None: when the problem has none, is not registered here, or `constrained=false`."""
  if not decode_hparams.constrained:
    return None
  problem = find_problem(read_record(output_dir)["problem"])
  return problem.decode_constraint(vocab) if problem is not None else None


# --- Models and checkpoints. ----------------------------------------------------------------------


def set_precision_policy(hparams: HParams) -> None:
  """Keras' global dtype policy for `hparams.mixed_precision` (layers built after it use it);
  `auto` is this machine's choice (`t2t_lite.fast_path`)."""
  keras.mixed_precision.set_global_policy(fast_path.resolve(hparams)[0].mixed_precision)


def build_model(hparams: HParams, vocab_size: int, model: str = DEFAULT_MODEL) -> keras.Model:
  """The model registered as `model` for `hparams`, built (every variable created)."""
  set_precision_policy(hparams)
  instance = registry.models.get(model)(hparams, vocab_size)
  dummy = np.ones((1, 2), "int32")
  instance({"inputs": dummy, "targets": dummy}, training=False)
  return instance


def checkpointable(model: keras.Model) -> dict:
  """The model as a checkpoint sees it: {variable path: variable}.

  Keras 3 keeps sub-layers held in Python lists (the encoder's layers) in its own tracked
  collections, which TensorFlow's object-graph checkpoints do not follow, so
  `tf.train.Checkpoint(model=model)` would silently save only some weights. Naming every variable
  by its unique Keras path saves all of them, independent of how layers are nested, with
  readable names (`encoder/layer_0/self_attention/qkv_kernel`). The model's own name is dropped
  from the path: Keras makes it unique per instance (`transformer_1`).
  """
  variables = {v.path.split("/", 1)[-1]: v for v in model.weights}
  if len(variables) != len(model.weights):
    raise ValueError("model variables have duplicate paths; give layers distinct names")
  return variables


def build_recorded_model(output_dir: str) -> tuple[HParams, keras.Model]:
  """(hparams, model): the model recorded in `output_dir`, built in float32, weights not loaded."""
  _, hparams = read_model_dir(output_dir)
  record = read_record(output_dir)
  model = build_model(hparams.replace(mixed_precision="float32"), record["vocab_size"],
                      record.get("model", DEFAULT_MODEL))
  return hparams, model


def restore_model(output_dir: str, checkpoint_path: str | None = None
                  ) -> tuple[HParams, keras.Model, str]:
  """Builds the model recorded in `output_dir` (float32) and loads a checkpoint (default: the
  latest; its weights' moving averages when it has them, see `restore_weights`). Returns
  (hparams, model, checkpoint path)."""
  read_record(output_dir)  # a missing hparams.json is the first thing to say
  path = checkpoint_path or tf.train.latest_checkpoint(output_dir)
  if not path:
    raise ModelDirError(
        f"{output_dir} has no checkpoint: train first (t2t-lite-trainer --output_dir={output_dir}) "
        "or pass --checkpoint_path.")
  if not tf.io.gfile.exists(path + ".index"):
    state = tf.train.get_checkpoint_state(os.path.dirname(path) or ".")
    kept = [os.path.basename(p) for p in (state.all_model_checkpoint_paths if state else [])]
    raise ModelDirError(
        f"no checkpoint {path} (no {path}.index); give a checkpoint's prefix, without .index or "
        ".data-*" + (f": {os.path.dirname(path) or '.'} has {', '.join(kept)}" if kept else ""))
  hparams, model = build_recorded_model(output_dir)
  restore_weights(model, path)
  return hparams, model, path


# --- Checkpoint contents. -------------------------------------------------------------------------


def _unescape(name: str) -> str:
  """A checkpoint key's object name back to the dict key: TensorFlow writes "/" as ".S" and "."
  as ".." in object-graph names."""
  return re.sub(r"\.(S|\.)", lambda m: "/" if m.group(1) == "S" else ".", name)


def checkpoint_shapes(path: str, root: str = "model") -> dict[str, list[int]]:
  """{variable path: shape} that checkpoint `path` holds under `root` ("model", or EMA_ROOT)."""
  suffix = "/.ATTRIBUTES/VARIABLE_VALUE"
  return {_unescape(name[len(root) + 1:-len(suffix)]): shape
          for name, shape in tf.train.list_variables(path)
          if name.startswith(root + "/") and name.endswith(suffix)}


def checkpoint_step(path: str) -> int | None:
  """The optimizer updates a checkpoint's training had done (None: it holds no optimizer)."""
  reader = tf.train.load_checkpoint(path)
  key = "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"
  return int(reader.get_tensor(key)) if reader.has_tensor(key) else None


def check_checkpoint_fits(model: keras.Model, path: str) -> None:
  """Raises ModelDirError naming each variable that `model` and checkpoint `path` do not share
  with the same shape (another architecture or vocabulary); seed-generator states aside."""
  saved = checkpoint_shapes(path)
  wanted = {name: list(v.shape) for name, v in checkpointable(model).items()
            if not name.endswith("seed_generator_state")}
  missing = sorted(set(wanted) - set(saved))
  extra = sorted(n for n in set(saved) - set(wanted) if not n.endswith("seed_generator_state"))
  shapes = {n: (saved[n], wanted[n]) for n in sorted(set(wanted) & set(saved)) if saved[n] != wanted[n]}
  if missing or extra or shapes:
    def listed(names, limit=6):
      return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
    parts = (["shapes differ (checkpoint, this model): " + listed(
        [f"{n} {a} vs {b}" for n, (a, b) in shapes.items()])] if shapes else []) + (
        [f"this model has variables the checkpoint lacks: {listed(missing)}"] if missing else []) + (
        [f"the checkpoint has variables this model lacks: {listed(extra)}"] if extra else [])
    raise ModelDirError(f"checkpoint {path} does not fit the model being trained: " + "; ".join(parts)
                        + ". Train with the source model's architecture and vocabulary (leave out "
                        "--hparams, or change only training settings).")


def restore_weights(model: keras.Model, path: str) -> None:
  """Loads checkpoint `path` into `model`: the moving averages of its weights when the checkpoint
  holds them (trained with weight_ema_decay > 0: what evaluation, decoding and export use), else
  the weights themselves."""
  variables = checkpointable(model)
  status = tf.train.Checkpoint(model=variables).restore(path).expect_partial()
  status.assert_existing_objects_matched()
  averages = checkpoint_shapes(path, EMA_ROOT)
  if averages:
    tf.train.Checkpoint(**{EMA_ROOT: {n: variables[n] for n in averages}}).restore(
        path).expect_partial().assert_existing_objects_matched()


# --- Warm start (T2T's --warm_start_from): a new model directory from another model's weights. ----


@dataclasses.dataclass(frozen=True)
class WarmStart:
  """Where a new training run takes its first weights from, and what else it keeps.

  checkpoint: a checkpoint prefix (`warm_start_source` finds it from a model directory).
  keep_optimizer: also restore the optimizer's state (Adam's moments) instead of a fresh one.
  keep_step: continue the source's update count (its learning-rate schedule) instead of 0.
  """
  checkpoint: str
  keep_optimizer: bool = False
  keep_step: bool = False


def warm_start_source(path: str) -> tuple[str, str]:
  """(the source's model directory, its checkpoint prefix) for `--warm_start_from=PATH`: a model
  directory (its latest checkpoint) or a checkpoint prefix inside one."""
  if os.path.isdir(path):
    read_record(path)
    checkpoint = tf.train.latest_checkpoint(path)
    if not checkpoint:
      raise ModelDirError(f"--warm_start_from={path} has no checkpoint; train it first, or give a "
                          "checkpoint prefix (DIR/ckpt-N)")
    return path, checkpoint
  if not tf.io.gfile.exists(path + ".index"):
    raise ModelDirError(f"--warm_start_from={path} is neither a model directory nor a checkpoint "
                        f"prefix (no {path}.index); give the trained or imported model's directory")
  source = os.path.dirname(os.path.abspath(path))
  read_record(source)
  return source, path


def architecture_differences(old: HParams, new: HParams) -> dict:
  """{field: (old, new)} of the architecture fields (`ModelConfig`'s) in which `new` differs;
  dropout rates aside (they change no weight)."""
  from t2t_lite.hparams.model_config import ModelConfig  # pylint: disable=import-outside-toplevel
  return {f.name: (getattr(old, f.name), getattr(new, f.name)) for f in dataclasses.fields(ModelConfig)
          if "dropout" not in f.name and getattr(old, f.name) != getattr(new, f.name)}


def warm_start_settings(source_dir: str, output_dir: str | None, hparams: HParams | None = None,
                        model: str | None = None) -> tuple[HParams, str, vocab_lib.SubwordVocab]:
  """(hparams, model name, vocabulary) of a run warm-started from the model in `source_dir`:
  the source's own unless `hparams` (training settings may differ, the architecture not) or
  `model` are given. Raises ModelDirError naming what differs from the source: architecture,
  model, or the vocabulary an existing `output_dir` already holds."""
  record = read_record(source_dir)
  _, source_hparams = read_model_dir(source_dir)
  source_model = record.get("model", DEFAULT_MODEL)
  if model is not None and model != source_model:
    raise ModelDirError(f"--model={model} but the warm-start source {source_dir} is a {source_model}; "
                        "leave --model out")
  hparams = hparams or source_hparams
  differences = architecture_differences(source_hparams, hparams)
  if differences:
    raise ModelDirError(f"the hparams differ from the warm-start source {source_dir} in its "
                        f"architecture (source, new): {differences}. Leave --hparams out, or "
                        "change only training settings (e.g. --hparams=learning_rate_constant=1)")
  vocab_path = os.path.join(source_dir, VOCAB_FILE)
  if not os.path.exists(vocab_path):
    raise ModelDirError(f"the warm-start source {source_dir} has no {VOCAB_FILE}; its vocabulary "
                        "is needed to read the new data in its ids")
  vocab = vocab_lib.SubwordVocab.from_file(vocab_path)
  if vocab.vocab_size != record.get("vocab_size", vocab.vocab_size):
    raise ModelDirError(f"{vocab_path} has {vocab.vocab_size} ids but {source_dir}/{HPARAMS_FILE} "
                        f"records {record['vocab_size']}")
  existing = os.path.join(output_dir or "", VOCAB_FILE)
  if output_dir and os.path.exists(existing):
    with open(existing, "rb") as f, open(vocab_path, "rb") as g:
      if f.read() != g.read():
        raise ModelDirError(
            f"{output_dir} already holds another vocabulary ({existing}) than the warm-start "
            f"source {source_dir} ({vocab.vocab_size} ids): warm start into a new --output_dir, or "
            "pass --overwrite_output_dir")
  return hparams, source_model, vocab


# --- The native Keras format (.keras). ------------------------------------------------------------


def save_keras(output_dir: str, path: str, checkpoint_path: str | None = None) -> str:
  """Saves the model of `output_dir` (a checkpoint, default the latest; its moving averages
  when it has them) as a `.keras` file that `keras.saving.load_model` loads, with the model
  directory's record (problem, model, hparams) and vocabulary inside (`load_keras` reads them).
  Written to a temporary file and renamed. Returns `path`."""
  if not path.endswith(".keras"):
    raise ModelDirError(f"{path}: a Keras file's name must end in .keras")
  _, model, _ = restore_model(output_dir, checkpoint_path)
  record = read_record(output_dir)
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".keras")
  os.close(fd)
  try:
    give_default_mode(tmp)
    model.save(tmp)
    with zipfile.ZipFile(tmp, "a") as archive:
      archive.writestr(KERAS_RECORD, json.dumps(record, indent=2, sort_keys=True))
      archive.writestr(KERAS_VOCAB, load_vocab(output_dir).model_proto)
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)
  return path


def load_keras(path: str) -> tuple[dict, object, keras.Model]:
  """(record, vocabulary, model) of a `.keras` file written by `save_keras`."""
  try:
    with zipfile.ZipFile(path) as archive:
      record = json.loads(archive.read(KERAS_RECORD))
      vocab = vocab_lib.vocab_from_proto(archive.read(KERAS_VOCAB))
  except (KeyError, zipfile.BadZipFile, FileNotFoundError) as e:
    raise ModelDirError(f"{path} is not a .keras file written by t2t_lite (save_keras, the "
                        f"trainer's --export_keras): {e}") from None
  set_precision_policy(HParams.from_json(json.dumps(record["hparams"])).replace(
      mixed_precision="float32"))
  return record, vocab, keras.saving.load_model(path)


@contextlib.contextmanager
def keras_model_dir(path: str):
  """`path` itself for a model directory; for a `.keras` file, a temporary model directory of
  its model (hparams.json, vocabulary, one checkpoint) for commands that read one."""
  if not path.endswith(".keras"):
    yield path
    return
  record, vocab, model = load_keras(path)
  with tempfile.TemporaryDirectory(prefix="t2t_lite_keras_") as folder:
    atomic_write(os.path.join(folder, HPARAMS_FILE), json.dumps(record, indent=2, sort_keys=True))
    atomic_write(os.path.join(folder, VOCAB_FILE), vocab.model_proto)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=checkpointable(model)), folder,
                               max_to_keep=None).save(checkpoint_number=0)
    yield folder
