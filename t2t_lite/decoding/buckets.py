"""The shapes a search is run at: source widths and batch sizes padded to a few buckets.

A search compiled by XLA (decode hparam `xla=true`) is one program per input shape, and the
first call of each shape pays for compiling it (seconds on a CPU). The decoder's `Translator`,
the exported SavedModel's graph and `t2t-lite-serve` pad every batch to these buckets, so a
file, a stream of requests or a server under load runs a handful of programs:

- source width (subwords with EOS): the next of WIDTH_BUCKETS, capped at the source limit;
- batch: the next power of two up to BATCH_STEP, then the next multiple of BATCH_STEP, capped
  at the largest batch (TF Serving's `allowed_batch_sizes` replace these sizes when given).

Padding does not change a sentence's output: padded positions are masked, each sentence stops
at its own length limit (source length + extra_length), and filler rows are dropped
(tests/test_decoder.py compares bucketed batches with each sentence decoded alone).
"""

import time

WIDTH_BUCKETS = (16, 32, 64, 128, 256, 512, 1024)
BATCH_STEP = 64


def width_buckets(limit: int) -> tuple[int, ...]:
  """The padded source widths for a source limit: WIDTH_BUCKETS below it, then the limit."""
  return tuple(w for w in WIDTH_BUCKETS if w < limit) + (limit,)


def padded_width(width: int, limit: int) -> int:
  """The bucket a batch whose longest source has `width` subwords (<= limit) is padded to."""
  if width > limit:
    raise ValueError(f"a source of {width} subwords is longer than the limit {limit}; truncate it")
  return next(w for w in width_buckets(limit) if w >= width)


def padded_batch_size(n: int) -> int:
  """The batch n sentences are padded to: a power of two up to BATCH_STEP, then a multiple of it.

  The SavedModel's graph computes the same with TensorFlow ops (`saved_model.padded_batch`).
  """
  n = max(int(n), 1)
  if n <= BATCH_STEP:
    return 1 << (n - 1).bit_length()
  return -(-n // BATCH_STEP) * BATCH_STEP


def batch_buckets(max_batch_size: int) -> tuple[int, ...]:
  """The padded batch sizes up to `max_batch_size`: 1, 2, 4, ... (`padded_batch_size`'s), then
  `max_batch_size` itself (the largest batch is never padded beyond it)."""
  if max_batch_size < 1:
    raise ValueError(f"the largest batch must be >= 1, got {max_batch_size}")
  sizes, n = [], 1
  while (size := padded_batch_size(n)) < max_batch_size:
    sizes.append(size)
    n = size + 1
  return tuple(sizes) + (max_batch_size,)


def padded_size(n: int, sizes: tuple[int, ...]) -> int:
  """The smallest of `sizes` (increasing) >= n; n itself when larger than all of them."""
  return next((size for size in sizes if size >= n), n)


def warm_up(batch_sizes, widths, run, log, describe=lambda rows, width: f"batch {rows} x width {width}"):
  """Calls `run(rows, width)` for each batch size at each width (widths outer), logging each with
  its time and the total; returns the [(rows, width)] run. A server's start-up compiles the
  programs of these shapes this way, before taking requests."""
  shapes = [(rows, width) for width in widths for rows in batch_sizes]
  started = time.monotonic()
  for number, (rows, width) in enumerate(shapes, 1):
    start = time.monotonic()
    run(rows, width)
    log(f"warm-up {number}/{len(shapes)}: {describe(rows, width)} ready in "
        f"{time.monotonic() - start:.1f} s")
  log(f"warm-up: {len(shapes)} shape{'s' * (len(shapes) != 1)} in {time.monotonic() - started:.1f} s")
  return shapes
