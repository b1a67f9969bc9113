"""Input pipeline throughput: text -> in-graph SentencePiece -> token-budget batches.

    python scripts/bench_pipeline.py [--raw_data_dir ../shared/data/tatoeba] [--batches 200]

Reads a local corpus's train split (default: Tatoeba EN-DE, 169,813 short pairs) through
`Problem.dataset(..., training=True)` exactly as training does (tokenize, EOS, length filter,
seeded shuffle, repeat, length buckets, prefetch) and reports pairs/s and tokens/s after a warm-up
(the first batches also fill the shuffle buffer). `measure_pipeline` returns the figures so they
can be set beside a training step's consumption (tokens/s the model eats).
"""

import argparse
import json
import os
import pathlib
import tempfile
import time

DEFAULT_DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "tatoeba"


def measure_pipeline(raw_data_dir=DEFAULT_DATA, data_dir=None, batch_size=4096, max_length=256,
                     vocab_size=8000, num_batches=200, warmup_batches=20, threads=None):
  """Runs the training pipeline; returns {"pairs_per_s", "tokens_per_s", "padded_tokens_per_s", ...}.

  tokens counts max(len(inputs), len(targets)) of each pair, EOS included (what the budget counts);
  padded tokens counts whole batches (B * L). `threads` caps tf.data's thread pool (None: TF's
  default, all cores).
  """
  import numpy as np  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel

  from t2t_lite.hparams import HParams  # pylint: disable=import-outside-toplevel
  from t2t_lite.problems import get_problem  # pylint: disable=import-outside-toplevel
  from t2t_lite.token_ids import PAD_ID  # pylint: disable=import-outside-toplevel

  problem = get_problem("translate_ende", raw_data_dir=str(raw_data_dir))
  problem.approx_vocab_size = vocab_size
  with tempfile.TemporaryDirectory() as scratch:
    data_dir = data_dir or scratch
    start = time.perf_counter()
    vocab = problem.get_vocab(data_dir)
    vocab_seconds = time.perf_counter() - start
    hparams = HParams(batch_size=batch_size, max_length=max_length)
    dataset = problem.dataset("train", data_dir, hparams, training=True)
    if threads:
      options = tf.data.Options()
      options.threading.private_threadpool_size = threads
      dataset = dataset.with_options(options)
    batches = iter(dataset)
    start = time.perf_counter()
    for _ in range(warmup_batches):
      next(batches)
    warmup_seconds = time.perf_counter() - start
    pairs = tokens = padded = 0
    start = time.perf_counter()
    for _ in range(num_batches):
      batch = next(batches)
      inputs, targets = batch["inputs"].numpy(), batch["targets"].numpy()
      pairs += inputs.shape[0]
      tokens += int(np.maximum((inputs != PAD_ID).sum(1), (targets != PAD_ID).sum(1)).sum())
      padded += inputs.shape[0] * inputs.shape[1]
    seconds = time.perf_counter() - start
  return {"corpus": str(raw_data_dir), "vocab_size": vocab.vocab_size,
          "vocab_build_s": round(vocab_seconds, 2), "warmup_s": round(warmup_seconds, 2),
          "batches": num_batches, "batch_size_tokens": batch_size, "seconds": round(seconds, 2),
          "pairs_per_s": round(pairs / seconds), "tokens_per_s": round(tokens / seconds),
          "padded_tokens_per_s": round(padded / seconds),
          "padding_fraction": round(1 - tokens / padded, 4), "cpu_count": os.cpu_count(),
          "threads": threads}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--raw_data_dir", default=str(DEFAULT_DATA))
  parser.add_argument("--batch_size", type=int, default=4096, help="tokens per batch")
  parser.add_argument("--batches", type=int, default=200)
  parser.add_argument("--threads", type=int, default=None)
  args = parser.parse_args(argv)
  figures = measure_pipeline(args.raw_data_dir, batch_size=args.batch_size,
                             num_batches=args.batches, threads=args.threads)
  print(json.dumps(figures, indent=2))


if __name__ == "__main__":
  main()
