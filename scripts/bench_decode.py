"""Decoding throughput: cached beam search and greedy against uncached decoding, fixed work.

    python scripts/bench_decode.py                          # tiny and base, batch 64 and 1
    python scripts/bench_decode.py --shapes base --batches 64

Random weights; every source has 30 tokens and every output exactly 30 (EOS is masked out and
`extra_length=0`, so each sentence runs to its length limit): the work is fixed, as in
CTranslate2's benchmark. Target tokens/s counts batch x 30 per sentence (the best beam only).
"Uncached" recomputes the decoder over the whole prefix at every step (the encoder once), as
T2T's slow decoding did; "cached" is the decoder's key/value cache (t2t_lite's default).
"""

import argparse
import os
import time

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from t2t_lite.decoding.translate import make_search_fn  # noqa: E402
from t2t_lite.hparams import DecodeHParams, get_hparams  # noqa: E402
from t2t_lite.models.transformer import Transformer  # noqa: E402

SHAPES = {"tiny": ("transformer_tiny", 8000), "base": ("transformer_base", 32000)}
LENGTH = 30
EOS = 1


class NoEos:
  """The model with EOS made impossible, so every output has its full length."""

  def __init__(self, model):
    self.model, self.vocab_size = model, model.vocab_size

  def encode(self, *args, **kwargs):
    return self.model.encode(*args, **kwargs)

  def init_cache(self, *args):
    return self.model.init_cache(*args)

  def decode_step(self, ids, step, cache):
    logits, cache = self.model.decode_step(ids, step, cache)
    return logits + tf.one_hot(EOS, self.vocab_size) * -1e9, cache


def uncached_greedy(model):
  @tf.function(input_signature=[tf.TensorSpec([None, None, None]), tf.TensorSpec([None, None], tf.bool),
                                tf.TensorSpec([None, None], tf.int32)])
  def next_token(memory, source_mask, prefix):
    x = model._embed(prefix, False)  # pylint: disable=protected-access
    x = model.decoder(x, memory, memory_padding_mask=source_mask, training=False)
    logits = model.embedding(x[:, -1:], reverse=True)[:, 0]
    logits += tf.one_hot(EOS, model.vocab_size) * -1e9
    return tf.argmax(logits, -1, output_type=tf.int32)

  def run(source):
    memory, mask = model.encode(source)
    prefix = tf.zeros((source.shape[0], 1), tf.int32)
    for _ in range(LENGTH):
      prefix = tf.concat([prefix, next_token(memory, mask, prefix)[:, None]], 1)
    return prefix.numpy()
  return run


def timed(fn, source, repeats):
  fn(source)  # trace / warm up
  start = time.perf_counter()
  for _ in range(repeats):
    fn(source)
  return (time.perf_counter() - start) / repeats


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--shapes", default="tiny,base")
  parser.add_argument("--batches", default="64,1")
  parser.add_argument("--repeats", type=int, default=2)
  args = parser.parse_args()
  print(f"oneDNN {os.environ.get('TF_ENABLE_ONEDNN_OPTS')}; source and output length {LENGTH}")
  print("| shape | batch | decoding | target tok/s | sentences/s |")
  print("|---|---|---|---|---|")
  for shape in args.shapes.split(","):
    set_name, vocab = SHAPES[shape]
    keras.utils.set_random_seed(0)
    model = Transformer.from_hparams(get_hparams(set_name), vocab)
    model({"inputs": np.ones((1, 2), "int32"), "targets": np.ones((1, 2), "int32")})  # build
    for batch in (int(b) for b in args.batches.split(",")):
      source = tf.constant(np.random.default_rng(0).integers(2, vocab, (batch, LENGTH)), tf.int32)
      runs = {}
      for name, dh in (("greedy, cached", DecodeHParams(beam_size=1, extra_length=0)),
                       ("beam 4, cached", DecodeHParams(beam_size=4, extra_length=0))):
        search = tf.function(make_search_fn(NoEos(model), dh, 1024))
        runs[name] = lambda s, f=search: [t.numpy() for t in f(s)]
      runs["greedy, uncached"] = uncached_greedy(model)
      rates = {}
      for name, fn in runs.items():
        seconds = timed(fn, source, args.repeats)
        rates[name] = batch * LENGTH / seconds
        print(f"| {shape} | {batch} | {name} | {rates[name]:,.0f} | {batch / seconds:,.1f} |", flush=True)
      print(f"| {shape} | {batch} | cached / uncached greedy | "
            f"{rates['greedy, cached'] / rates['greedy, uncached']:.1f}x | |", flush=True)


if __name__ == "__main__":
  main()
