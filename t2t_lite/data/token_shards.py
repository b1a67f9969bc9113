"""Prepare once (T2T's t2t-datagen): the vocabulary plus tokenized TFRecord shards in data_dir.

    <data_dir>/vocab.<problem>.<size>.model                  the vocabulary (and .vocab, .json)
    <data_dir>/<problem>-<split>-00000-of-0000N.tfrecord     tf.train.Example {"inputs", "targets"}:
                                                             int64 ids, no EOS
    <data_dir>/<problem>.datagen.json                        what was written, for which vocabulary

`Problem.dataset` reads a split's shards instead of re-tokenizing when the manifest names the
vocabulary it is using (same sha256) and the raw files the split is read from are unchanged
(`Problem.raw_files`: same size and modification time, or else the same sha256); otherwise it
tokenizes the text in-graph as if datagen never ran. Rerunning datagen rewrites only the splits
whose vocabulary or raw files changed. Raw files deleted after datagen leave the shards in use
(there is nothing else to read). Pairs are written round-robin over the shards and read back
interleaved, so the order is kept. The manifest is written to a temporary file and renamed.
"""

import hashlib
import json
import logging
import os

import tensorflow as tf

from t2t_lite.data import pipeline

logger = logging.getLogger(__name__)

DEFAULT_TRAIN_SHARDS = 8


def manifest_path(data_dir, problem_name):
  return os.path.join(data_dir, f"{problem_name}.datagen.json")


def shard_names(problem_name, split, num_shards):
  return [f"{problem_name}-{split}-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]


def _vocab_sha256(vocab):
  return hashlib.sha256(vocab.model_proto).hexdigest()


def _file_sha256(path):
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def raw_file_records(paths):
  """What the manifest keeps of each raw file: path, size, modification time, sha256."""
  records = []
  for path in paths:
    stat = os.stat(path)
    records.append({"path": os.path.abspath(path), "size": stat.st_size,
                    "mtime_ns": stat.st_mtime_ns, "sha256": _file_sha256(path)})
  return records


def raw_files_unchanged(records, paths):
  """True when `paths` hold what `records` describe (a file of another path or modification
  time counts as unchanged if its bytes are the same; a file no longer there is not compared)."""
  if len(records) != len(paths):
    return False
  for record, path in zip(records, paths):
    if not os.path.exists(path):
      continue
    stat = os.stat(path)
    if stat.st_size != record["size"]:
      return False
    same_file = os.path.abspath(path) == record["path"] and stat.st_mtime_ns == record["mtime_ns"]
    if not same_file and _file_sha256(path) != record["sha256"]:
      return False
  return True


def read_manifest(data_dir, problem_name):
  """The manifest dict, or None when datagen has not run for `problem_name` in `data_dir`."""
  if data_dir is None or not os.path.exists(manifest_path(data_dir, problem_name)):
    return None
  with open(manifest_path(data_dir, problem_name), encoding="utf-8") as f:
    return json.load(f)


def _write_manifest(data_dir, problem_name, manifest):
  """Through a temporary file and a rename: a kill or an error leaves the previous one whole."""
  path = manifest_path(data_dir, problem_name)
  try:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
      json.dump(manifest, f, indent=2)
    os.replace(path + ".tmp", path)
  finally:
    if os.path.exists(path + ".tmp"):
      os.remove(path + ".tmp")


def _stale_reason(manifest, split, vocab, raw_files):
  """Why the shards of `split` cannot be used (None when they can)."""
  entry = (manifest or {}).get("splits", {}).get(split)
  if entry is None:
    return "not written"
  if manifest.get("vocab_sha256") != _vocab_sha256(vocab):
    return "written with another vocabulary"
  if not raw_files_unchanged(entry.get("raw_files", []), list(raw_files)):
    return "written from raw files that have changed since"
  return None


def _serialize(inputs, targets):
  feature = {key: tf.train.Feature(int64_list=tf.train.Int64List(value=ids))
             for key, ids in (("inputs", inputs), ("targets", targets))}
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_token_shards(token_chunks, folder, names):
  """Writes the id pairs of `pipeline.tokenize` chunks round-robin into the TFRecord files `names`."""
  paths = [os.path.join(folder, name) for name in names]
  writers = [tf.io.TFRecordWriter(path + ".tmp") for path in paths]
  count = 0
  for chunk in token_chunks:
    for inputs, targets in zip(chunk["inputs"].to_list(), chunk["targets"].to_list()):
      writers[count % len(writers)].write(_serialize(inputs, targets))
      count += 1
  for writer, path in zip(writers, paths):
    writer.close()
    os.replace(path + ".tmp", path)
  return count


def generate_data(problem, data_dir: str, splits: tuple[str, ...] = ("train", "dev", "test"),
                  train_shards: int = DEFAULT_TRAIN_SHARDS) -> dict:
  """Builds the vocabulary and writes tokenized shards of `splits`; returns the manifest dict.

  A split whose shards are up to date (same vocabulary, unchanged raw files, same number of
  shards) is kept as it is. A `_rev` problem writes its base problem's shards (the reversed one
  swaps them when reading). Splits the problem does not have (no files) are skipped with a
  warning.
  """
  if train_shards < 1:
    raise ValueError(f"train_shards must be >= 1, got {train_shards}")
  problem = getattr(problem, "base", problem)
  os.makedirs(data_dir, exist_ok=True)
  vocab = problem.get_vocab(data_dir)
  old = read_manifest(data_dir, problem.name)
  manifest = {"problem": problem.name, "vocab_sha256": _vocab_sha256(vocab),
              "vocab_size": vocab.vocab_size, "splits": {}}
  for split in splits:
    names = shard_names(problem.name, split, train_shards if split == "train" else 1)
    try:
      texts = problem.text_dataset(split, data_dir)
      raw_files = problem.raw_files(split)
    except (ValueError, FileNotFoundError) as e:
      logger.warning("datagen: skipping split %s of %s: %s", split, problem.name, e)
      continue
    entry = (old or {}).get("splits", {}).get(split)
    if (_stale_reason(old, split, vocab, raw_files) is None and entry["files"] == names and
        all(os.path.exists(os.path.join(data_dir, name)) for name in names)):
      manifest["splits"][split] = entry
      logger.info("datagen: the %s shards of %s are up to date", split, problem.name)
      continue
    records = raw_file_records(raw_files)
    pairs = write_token_shards(pipeline.tokenize(texts, vocab), data_dir, names)
    manifest["splits"][split] = {"files": names, "pairs": pairs, "raw_files": records}
    logger.info("datagen: wrote %d %s pairs of %s to %d shards", pairs, split, problem.name,
                len(names))
  for split, entry in (old or {}).get("splits", {}).items():  # splits not asked for this time
    if split not in manifest["splits"] and old.get("vocab_sha256") == manifest["vocab_sha256"]:
      manifest["splits"][split] = entry
  _write_manifest(data_dir, problem.name, manifest)
  return manifest


def read_token_shards(problem_name, split, data_dir, vocab, input_context=None, raw_files=()):
  """Chunks like `pipeline.tokenize` gives ({"inputs", "targets"}: int32 ragged [N, (len)]), or None.

  None when there is no manifest, it lacks the split, it was written with another vocabulary,
  or from raw files (`raw_files`, the paths the split's text is read from) that changed since.
  With `input_context`, only this input pipeline's share of the pairs (`pipeline.shard`).
  """
  manifest = read_manifest(data_dir, problem_name)
  if manifest is None or split not in manifest.get("splits", {}):
    return None
  reason = _stale_reason(manifest, split, vocab, raw_files)
  if reason:
    logger.warning("datagen shards of %s (%s) in %s were %s; tokenizing the text instead (re-run "
                   "datagen to use shards)", problem_name, split, data_dir, reason)
    return None
  entry = manifest["splits"][split]
  paths = [os.path.join(data_dir, name) for name in entry["files"]]
  spec = {key: tf.io.RaggedFeature(tf.int64) for key in pipeline.FEATURES}

  def parse(records):
    examples = tf.io.parse_example(records, spec)
    return {key: tf.cast(examples[key], tf.int32) for key in spec}     # ragged [N, (len)]

  files = tf.data.Dataset.from_tensor_slices(paths)
  records = files.interleave(tf.data.TFRecordDataset, cycle_length=len(paths), block_length=1)
  records = pipeline.shard(records, input_context)
  return records.batch(pipeline.CHUNK_SIZE).map(parse, num_parallel_calls=tf.data.AUTOTUNE,
                                                deterministic=True)
