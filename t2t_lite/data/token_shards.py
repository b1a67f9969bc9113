"""Prepare once (T2T's t2t-datagen): the vocabulary plus tokenized TFRecord shards in data_dir.

    <data_dir>/vocab.<problem>.<size>.model                  the vocabulary (and .vocab, .json)
    <data_dir>/<problem>-<split>-00000-of-0000N.tfrecord     tf.train.Example {"inputs", "targets"}:
                                                             int64 ids, no EOS
    <data_dir>/<problem>.datagen.json                        what was written, for which vocabulary

`Problem.dataset` reads the shards instead of re-tokenizing when the manifest names the vocabulary
it is using (same sha256); otherwise it tokenizes the text in-graph as if datagen never ran.
Pairs are written round-robin over the shards and read back interleaved, so the order is kept.
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

  A `_rev` problem writes its base problem's shards (the reversed one swaps them when reading).
  Splits the problem does not have (no files) are skipped with a warning.
  """
  problem = getattr(problem, "base", problem)
  os.makedirs(data_dir, exist_ok=True)
  vocab = problem.get_vocab(data_dir)
  manifest = {"problem": problem.name, "vocab_sha256": _vocab_sha256(vocab),
              "vocab_size": vocab.vocab_size, "splits": {}}
  for split in splits:
    names = shard_names(problem.name, split, train_shards if split == "train" else 1)
    try:
      texts = problem.text_dataset(split, data_dir)
    except (ValueError, FileNotFoundError) as e:
      logger.warning("datagen: skipping split %s of %s: %s", split, problem.name, e)
      continue
    pairs = write_token_shards(pipeline.tokenize(texts, vocab), data_dir, names)
    manifest["splits"][split] = {"files": names, "pairs": pairs}
    logger.info("datagen: wrote %d %s pairs of %s to %d shards", pairs, split, problem.name,
                len(names))
  with open(manifest_path(data_dir, problem.name), "w", encoding="utf-8") as f:
    json.dump(manifest, f, indent=2)
  return manifest


def read_token_shards(problem_name, split, data_dir, vocab, input_context=None):
  """Chunks like `pipeline.tokenize` gives ({"inputs", "targets"}: int32 ragged [N, (len)]), or None.

  None when there is no manifest, it lacks the split, or it was written with another vocabulary.
  With `input_context`, only this input pipeline's share of the pairs (`pipeline.shard`).
  """
  if data_dir is None or not os.path.exists(manifest_path(data_dir, problem_name)):
    return None
  with open(manifest_path(data_dir, problem_name), encoding="utf-8") as f:
    manifest = json.load(f)
  entry = manifest.get("splits", {}).get(split)
  if entry is None:
    return None
  if manifest.get("vocab_sha256") != _vocab_sha256(vocab):
    logger.warning("datagen shards of %s in %s were written with another vocabulary; "
                   "tokenizing the text instead (re-run datagen to use them)", problem_name, data_dir)
    return None
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
