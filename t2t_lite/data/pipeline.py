"""The input pipeline: text pairs -> token-budget batches, one small named step per function.

    read -> shard -> tokenize -> append_eos -> filter_by_length (train) -> shuffle -> repeat (train)
         -> batch_by_length -> prefetch

`make_batches` chains them; each step is a plain function of a tf.data.Dataset so a test (or a
user) can run any prefix of the chain.

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

MIN_BUCKET_LENGTH = 8
DEFAULT_SHUFFLE_BUFFER = 10_000
TOKENIZE_BATCH = 256


def shard(dataset, input_context=None):
  """Keeps this input pipeline's share of the examples (multi-worker training).

  Example: with 2 pipelines, pipeline 0 keeps examples 0, 2, 4, ... and pipeline 1 keeps 1, 3, 5.
      >>> shard(ds, tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1))
  """
  if input_context is None or input_context.num_input_pipelines == 1:
    return dataset
  return dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)


def tokenize(dataset, vocab):
  """{"inputs": "Hello world", "targets": "Hallo Welt"} -> {"inputs": [8412, 232], "targets": [...]}.

  Tokenizes TOKENIZE_BATCH strings per call (the tokenizer is much faster on batches), then
  unbatches; the order of examples is kept. Ids are int32, no EOS yet.
  """

  def tokenize_batch(batch):
    return {key: vocab.tokenize(batch[key]) for key in ("inputs", "targets")}

  def to_dense(example):
    return {key: value.to_tensor() if isinstance(value, tf.RaggedTensor) else value
            for key, value in example.items()}

  return (dataset.batch(TOKENIZE_BATCH)
          .map(tokenize_batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
          .unbatch()
          .map(to_dense))


def append_eos(dataset, eos_id=1):
  """{"inputs": [8412, 232], "targets": [77]} -> {"inputs": [8412, 232, 1], "targets": [77, 1]}.

  T2T appends EOS to inputs and targets: the decoder learns to stop, and the encoder sees where the
  sentence ends.
  """
  eos = tf.constant([eos_id], tf.int32)
  return dataset.map(lambda ex: {key: tf.concat([ids, eos], axis=0) for key, ids in ex.items()},
                     num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def example_length(example):
  """max(len(inputs), len(targets)): what a pair costs in a token-budget batch (T2T)."""
  return tf.maximum(tf.size(example["inputs"]), tf.size(example["targets"]))


def filter_by_length(dataset, max_length):
  """Drops pairs whose longer side (EOS included) exceeds `max_length`; 0 keeps all. Training only.

  Example: max_length=3 keeps {"inputs": [5, 1], "targets": [6, 7, 1]} and drops
  {"inputs": [5, 6, 7, 1], "targets": [6, 1]}.
  """
  if not max_length:
    return dataset
  return dataset.filter(lambda ex: example_length(ex) <= max_length)


def shuffle(dataset, seed, buffer_size=DEFAULT_SHUFFLE_BUFFER):
  """Seeded shuffle over a `buffer_size` window; a new (still seeded) order every epoch.

  Example: [a, b, c, d] -> [c, a, d, b] in epoch 1, [b, d, a, c] in epoch 2, the same on every run.
  """
  return dataset.shuffle(buffer_size, seed=seed, reshuffle_each_iteration=True)


def bucket_boundaries(max_length, min_length=MIN_BUCKET_LENGTH, length_bucket_step=1.1):
  """Inclusive upper bounds of the length buckets, geometric with ratio `length_bucket_step`.

  The last bound is `max_length` (T2T's `_bucket_boundaries` plus the final bucket).

  Example:
      >>> bucket_boundaries(20)
      [8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 20]
      >>> len(bucket_boundaries(256))
      40
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
                    static_shapes=False, drop_remainder=False):
  """Groups pairs into token-budget batches: {"inputs": [B, L], "targets": [B, L]}, 0-padded.

  A pair of length l (see `example_length`) goes to the first bucket whose bound U >= l; its batch
  holds batch_size // U pairs padded to U, so it never exceeds `batch_size` tokens (unless a single
  pair is longer than the budget). Pairs longer than `max_length` (eval keeps them) go to an
  overflow bucket of one pair per batch, padded to its own length.

  Example (batch_size=32, max_length=16): lengths [3, 9, 4] -> bounds [8, 9, 10, ..., 16];
  the 3 and the 4 share a [4, 8] batch (32 // 8 = 4 pairs of 8 tokens), the 9 goes to a [3, 9] one.

  With `static_shapes`, every batch is [batch_size // max_length, max_length] and, if
  `drop_remainder`, incomplete batches are dropped so the shape never changes.
  """
  if static_shapes:
    boundaries = [max_length]
  else:
    boundaries = bucket_boundaries(max_length, min(MIN_BUCKET_LENGTH, max_length),
                                   length_bucket_step)
  # The overflow bucket: batch of 1, padded to the batch's own length (-1).
  upper = tf.constant(boundaries + [-1], tf.int64)
  sizes = tf.constant(bucket_batch_sizes(boundaries, batch_size) + [1], tf.int64)

  def bucket_id(example):
    length = tf.cast(example_length(example), tf.int64)
    return tf.cast(tf.searchsorted(upper[:-1], tf.reshape(length, [1]), side="left")[0], tf.int64)

  def batch_window(bucket, window):
    padded_length = tf.reshape(upper[bucket], [1])
    return window.padded_batch(sizes[bucket],
                               padded_shapes={"inputs": padded_length, "targets": padded_length},
                               drop_remainder=drop_remainder)

  return dataset.group_by_window(bucket_id, batch_window, window_size_func=lambda b: sizes[b])


def prefetch(dataset):
  """Lets tf.data prepare the next batches while the accelerator works on this one."""
  return dataset.prefetch(tf.data.AUTOTUNE)


def make_batches(token_dataset, hparams, training, eos_id=1,
                 shuffle_buffer=DEFAULT_SHUFFLE_BUFFER):
  """The chain after tokenization: ids without EOS -> training or evaluation batches.

  Training: append EOS, drop pairs longer than `hparams.max_length`, shuffle (seeded by
  `hparams.seed`), repeat forever, batch by length, prefetch. Evaluation: append EOS, keep every
  pair in one pass, batch by length, prefetch.
  """
  dataset = append_eos(token_dataset, eos_id)
  if training:
    dataset = filter_by_length(dataset, hparams.max_length)
    dataset = shuffle(dataset, hparams.seed, shuffle_buffer).repeat()
  max_length = hparams.max_length or 256
  dataset = batch_by_length(dataset, hparams.batch_size, max_length, hparams.length_bucket_step,
                            static_shapes=hparams.static_batch_shapes,
                            drop_remainder=training and hparams.static_batch_shapes)
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
    used += int(np.maximum((inputs != 0).sum(1), (targets != 0).sum(1)).sum())
    padded += inputs.shape[0] * max(inputs.shape[1], targets.shape[1])
    nonpad += int((inputs != 0).sum() + (targets != 0).sum())
    count += 1
    if max_batches and count >= max_batches:
      break
  if not count:
    raise ValueError("no batches to measure")
  return {"budget": 1 - used / padded, "tensor": 1 - nonpad / (2 * padded), "tokens": used,
          "batches": count}
