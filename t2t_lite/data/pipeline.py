"""The input pipeline: text pairs -> token-budget batches, one small named step per function.

    read -> shard -> tokenize -> cache (train) -> append_eos -> truncate
         -> filter_by_length (train) -> unchunk -> shuffle -> repeat (train) -> batch_by_length
         -> prefetch

`make_batches` chains the steps after `tokenize` and the training split's cache, which
`Problem.dataset` adds (ids kept in memory after the first pass); each step is a plain function of
a tf.data.Dataset, so a test (or a user) can run any prefix of the chain.

Speed: a per-example tf.data map costs tens of microseconds, so `tokenize`, `append_eos` and
`filter_by_length` work on CHUNKS of up to CHUNK_SIZE pairs ({"inputs": RaggedTensor [N, (len)],
"targets": RaggedTensor [N, (len)]}); `unchunk` then yields single pairs for shuffling and bucketing.

Batching follows T2T: `batch_size` counts TOKENS per replica, max(len(inputs), len(targets))
including padding and EOS. Pairs are grouped into geometric length buckets (each upper bound about
`length_bucket_step` = 1.1 times the previous one), every batch of a bucket is padded to that
bucket's upper bound and holds `batch_size // bound` pairs. So padding stays low, a batch never
holds more than `batch_size` tokens, and the number of distinct shapes is small (one per bucket).
With `static_batch_shapes` every batch is [batch_size // max_length, max_length] (TPU / XLA).

Under tf.distribute use `strategy.distribute_datasets_from_function(lambda ctx: ...dataset(...,
input_context=ctx))`: each input pipeline reads its own shard (`input_pipeline_id` of
`num_input_pipelines`) and yields per-replica batches, so the budget is per replica, as in T2T.
"""

import numpy as np
import tensorflow as tf
from tensorflow.python.data.util import structure  # the flat types tf.data's own ops are given
from tensorflow.python.framework import random_seed  # the seed tf.data uses without a global one

from t2t_lite.graph_functions import dataset_function
from t2t_lite.token_ids import EOS_ID, PAD_ID

MIN_BUCKET_LENGTH = 8
DEFAULT_SHUFFLE_BUFFER = 10_000
CHUNK_SIZE = 256
FEATURES = ("inputs", "targets")


def shard(dataset, input_context=None):
  """Keeps this input pipeline's share of the examples (multi-worker training).

  Example: with 2 pipelines, pipeline 0 keeps examples 0, 2, 4, ... and pipeline 1 keeps 1, 3, 5.
      >>> shard(ds, tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1))
  """
  if input_context is None or input_context.num_input_pipelines == 1:
    return dataset
  return dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)


def tokenize(dataset, vocab, sampling_alpha=0.0):
  """Text pairs -> chunks of ids: {"inputs": "Hello world", ...} x N -> {"inputs": [[8412, 232], ...]}.

  Takes single {"inputs": tf.string, "targets": tf.string} pairs, returns chunks of up to
  CHUNK_SIZE pairs as int32 RaggedTensors [N, (len)], no EOS yet, order kept. With
  `sampling_alpha` > 0 each pass segments by sampling (`vocab.sampling`: subword regularization,
  BPE-dropout for a BPE model), so a repeated dataset sees other segmentations each epoch.
  """
  if sampling_alpha > 0:
    if not hasattr(vocab, "sampling"):
      raise ValueError(f"subword_sampling_alpha={sampling_alpha} needs a SentencePiece vocabulary "
                       f"of one model; this problem's is a {type(vocab).__name__}: set "
                       "subword_sampling_alpha=0")
    vocab = vocab.sampling(sampling_alpha)

  # What tf.data traces here is plain TensorFlow ops: `dataset_function` traces it as written.
  @dataset_function
  def tokenize_chunk(chunk):  # the target side may have a tokenizer of its own (PairedSubwordVocab)
    return {"inputs": vocab.tokenize(chunk["inputs"]),
            "targets": vocab.tokenize_targets(chunk["targets"])}

  return dataset.batch(CHUNK_SIZE).map(tokenize_chunk, num_parallel_calls=tf.data.AUTOTUNE,
                                       deterministic=True)


def append_eos(chunks, eos_id=EOS_ID):
  """{"inputs": [[8412, 232]], "targets": [[77]]} -> {"inputs": [[8412, 232, 1]], "targets": [[77, 1]]}.

  T2T appends EOS to inputs and targets: the decoder learns to stop, and the encoder sees where the
  sentence ends.
  """

  @dataset_function
  def append(chunk):
    return {key: tf.concat([ids, tf.fill([ids.nrows(), 1], tf.constant(eos_id, ids.dtype))], axis=1)
            for key, ids in chunk.items()}

  return chunks.map(append, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def truncate(chunks, max_input_length=0, max_target_length=0):
  """Cuts inputs and targets (EOS included) to at most these lengths; <= 0 leaves a side whole.

  T2T's `max_input_seq_length` / `max_target_seq_length` (its `preprocess_example_common`).
  Example: max_input_length=2 turns {"inputs": [[5, 6, 7, 1]]} into {"inputs": [[5, 6]]}.
  """
  limits = {"inputs": max_input_length, "targets": max_target_length}
  if all(limit <= 0 for limit in limits.values()):
    return chunks

  @dataset_function
  def cut(chunk):
    return {key: ids[:, :limits[key]] if limits[key] > 0 else ids for key, ids in chunk.items()}

  return chunks.map(cut, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def example_length(example):
  """max(len(inputs), len(targets)) of a single pair: what it costs in a token-budget batch (T2T)."""
  return tf.maximum(tf.size(example["inputs"]), tf.size(example["targets"]))


def filter_by_length(chunks, max_length):
  """Drops pairs whose longer side (EOS included) exceeds `max_length`; 0 keeps all. Training only.

  Example: max_length=3 keeps {"inputs": [5, 1], "targets": [6, 7, 1]} and drops
  {"inputs": [5, 6, 7, 1], "targets": [6, 1]} from a chunk holding both.
  """
  if not max_length:
    return chunks

  @dataset_function
  def keep_short(chunk):
    lengths = tf.maximum(tf.cast(chunk["inputs"].row_lengths(), tf.int64),
                         tf.cast(chunk["targets"].row_lengths(), tf.int64))           # [N]
    short = lengths <= max_length
    return {key: tf.ragged.boolean_mask(ids, short) for key, ids in chunk.items()}

  return chunks.map(keep_short, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def unchunk(chunks):
  """Chunks -> single pairs {"inputs": int32 [S], "targets": int32 [T]}, in order."""
  return chunks.unbatch()


def shuffle(dataset, seed, buffer_size=DEFAULT_SHUFFLE_BUFFER):
  """Seeded shuffle over a `buffer_size` window; a new (still seeded) order every epoch.

  Example: [a, b, c, d] -> [c, a, d, b] in epoch 1, [b, d, a, c] in epoch 2, the same on every run.

  The order depends on `seed` alone: `Dataset.shuffle(seed=s)` pairs s with TensorFlow's global
  seed if the process has set one (`tf.random.set_seed`, `keras.utils.set_random_seed`), so the
  same hparams seed would give another order after such a call. This is that op,
  `ShuffleDatasetV3`, given the seed pair it gets when none is set, `(DEFAULT_GRAPH_SEED, seed)`,
  whatever the process did: the order of a run without a global seed, always.
  """
  spec = dataset.element_spec  # as tf.data's ops take it (ragged elements are variants)
  variant = tf.raw_ops.ShuffleDatasetV3(
      input_dataset=tf.data.experimental.to_variant(dataset),
      buffer_size=tf.constant(buffer_size, tf.int64),
      seed=tf.constant(random_seed.DEFAULT_GRAPH_SEED, tf.int64), seed2=tf.constant(seed, tf.int64),
      seed_generator=tf.raw_ops.DummySeedGenerator(),
      reshuffle_each_iteration=True, output_types=structure.get_flat_tensor_types(spec),
      output_shapes=structure.get_flat_tensor_shapes(spec))
  shuffled = tf.data.experimental.from_variant(variant, spec)
  return shuffled.with_options(dataset.options())


def bucket_boundaries(max_length, min_length=MIN_BUCKET_LENGTH, length_bucket_step=1.1):
  """Inclusive upper bounds of the length buckets, geometric with ratio `length_bucket_step`.

  The last bound is `max_length` (T2T's `_bucket_boundaries` plus the final bucket).

  Example:
      >>> bucket_boundaries(20)
      [8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
      >>> len(bucket_boundaries(256))
      42
  """
  if length_bucket_step <= 1.0:
    raise ValueError(f"length_bucket_step must be > 1, got {length_bucket_step}")
  bounds, x = [], min_length
  while x < max_length:
    bounds.append(x)
    x = max(x + 1, int(x * length_bucket_step))
  return bounds + [max_length]


def bucket_batch_sizes(boundaries, batch_size):
  """Pairs per batch in each bucket: the token budget over the bucket's padded length, at least 1.

  Example:
      >>> bucket_batch_sizes([8, 9, 10, 256], 4096)
      [512, 455, 409, 16]
  """
  return [max(1, batch_size // bound) for bound in boundaries]


def batch_by_length(dataset, batch_size, max_length, length_bucket_step=1.1,
                    static_shapes=False, drop_remainder=False, fixed_batch_size=False):
  """Groups pairs into token-budget batches: {"inputs": [B, L], "targets": [B, L]}, 0-padded.

  A pair of length l (see `example_length`) goes to the first bucket whose bound U >= l; its batch
  holds batch_size // U pairs padded to U, so it never exceeds `batch_size` tokens (unless a single
  pair is longer than the budget). Pairs longer than `max_length` (eval keeps them) go to an
  overflow bucket of one pair per batch, padded to its own length.

  Example (batch_size=32, max_length=16): lengths [3, 9, 4] -> bounds [8, 9, 10, ..., 16];
  the 3 and the 4 go into one batch of up to 32 // 8 = 4 pairs padded to 8, the 9 into a batch of
  up to 32 // 9 = 3 pairs padded to 9.

  With `static_shapes`, every batch is [batch_size // max_length, max_length] and, if
  `drop_remainder`, incomplete batches are dropped so the shape never changes.
  With `fixed_batch_size` (T2T's `use_fixed_batch_size`), `batch_size` counts pairs: batches of
  `batch_size` pairs in input order, each padded to its longest pair (no buckets).
  """
  if fixed_batch_size:
    upper = tf.constant([-1], tf.int64)
    return dataset.ragged_batch(batch_size, drop_remainder=drop_remainder).map(
        dataset_function(
            lambda batch: _pad(batch, upper[0], False, batch_size, max_length)))
  if static_shapes:
    boundaries = [max_length]
  else:
    boundaries = bucket_boundaries(max_length, min(MIN_BUCKET_LENGTH, max_length),
                                   length_bucket_step)
  # The overflow bucket: batch of 1, padded to the batch's own length (-1).
  upper = tf.constant(boundaries + [-1], tf.int64)
  sizes = tf.constant(bucket_batch_sizes(boundaries, batch_size) + [1], tf.int64)

  @dataset_function
  def bucket_id(example):
    length = tf.cast(example_length(example), tf.int64)
    return tf.cast(tf.searchsorted(upper[:-1], tf.reshape(length, [1]), side="left")[0], tf.int64)

  @dataset_function
  def batch_window(bucket, window):
    return (window.ragged_batch(sizes[bucket], drop_remainder=drop_remainder)
            .map(dataset_function(
                lambda batch: _pad(batch, upper[bucket], static_shapes and drop_remainder,
                                   batch_size, max_length))))

  window_size = dataset_function(lambda b: sizes[b])
  return dataset.group_by_window(bucket_id, batch_window, window_size_func=window_size)


def _pad(batch, padded_length, static, batch_size, max_length):
  """A ragged batch -> {"inputs": [B, L], "targets": [B, L]}, 0-padded to `padded_length` (-1:
  the longest pair of the batch); `static` fixes the shape to [batch_size // max_length,
  max_length]."""
  longest = tf.cast(tf.maximum(tf.reduce_max(batch["inputs"].row_lengths()),
                               tf.reduce_max(batch["targets"].row_lengths())), tf.int64)
  length = tf.where(padded_length < 0, longest, padded_length)
  padded = {key: ids.to_tensor(PAD_ID, shape=tf.stack([tf.cast(ids.nrows(), tf.int64), length]))
            for key, ids in batch.items()}                          # [B, L] each
  if static:
    fixed = [bucket_batch_sizes([max_length], batch_size)[0], max_length]
    padded = {key: tf.ensure_shape(ids, fixed) for key, ids in padded.items()}
  return padded


def prefetch(dataset):
  """Lets tf.data prepare the next batches while the accelerator works on this one."""
  return dataset.prefetch(tf.data.AUTOTUNE)


def make_batches(token_chunks, hparams, training, eos_id=EOS_ID,
                 shuffle_buffer=DEFAULT_SHUFFLE_BUFFER):
  """The chain after `tokenize`: chunks of ids without EOS -> training or evaluation batches.

  Training: append EOS, cut to `max_input_seq_length` / `max_target_seq_length` (T2T's; 0: no
  cut), drop pairs longer than `hparams.max_length`, shuffle (seeded by `hparams.seed`), repeat
  forever, batch by length, prefetch. Evaluation: append EOS, cut likewise, keep every pair in one
  pass, batch by length, prefetch.
  """
  chunks = truncate(append_eos(token_chunks, eos_id), hparams.max_input_seq_length,
                    hparams.max_target_seq_length)
  if training:
    chunks = filter_by_length(chunks, hparams.max_length)
  dataset = unchunk(chunks)
  if training:
    dataset = shuffle(dataset, hparams.seed, shuffle_buffer).repeat()
  max_length = hparams.max_length or 256
  dataset = batch_by_length(dataset, hparams.batch_size, max_length, hparams.length_bucket_step,
                            static_shapes=hparams.static_batch_shapes,
                            drop_remainder=training and hparams.static_batch_shapes,
                            fixed_batch_size=hparams.use_fixed_batch_size)
  return prefetch(dataset)


def padding_fraction(batches, max_batches=None):
  """Measures the padding of batches: {"budget", "tensor", "tokens", "batches"}.

  "budget": the share of the padded batch tokens (B * L) not used by max(len(inputs),
  len(targets)) of each pair, i.e. the waste the length buckets control (T2T's token count).
  "tensor": the share of PAD in the inputs and targets tensors together; it also counts the
  difference in length between a sentence and its translation.

  Example: one batch, inputs [[5, 1, 0, 0]], targets [[6, 7, 1, 0]] -> budget 1 - 3/4 = 0.25,
  tensor 1 - 5/8 = 0.375.
  """
  used = padded = nonpad = count = 0
  for batch in batches:
    inputs, targets = batch["inputs"].numpy(), batch["targets"].numpy()   # [B, S], [B, T]
    used += int(np.maximum((inputs != PAD_ID).sum(1), (targets != PAD_ID).sum(1)).sum())
    padded += inputs.shape[0] * max(inputs.shape[1], targets.shape[1])
    nonpad += int((inputs != PAD_ID).sum() + (targets != PAD_ID).sum())
    count += 1
    if max_batches and count >= max_batches:
      break
  if not count:
    raise ValueError("no batches to measure")
  return {"budget": 1 - used / padded, "tensor": 1 - nonpad / (2 * padded), "tokens": used,
          "batches": count}
