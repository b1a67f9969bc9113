"""What batching costs a search: the decoder's sorted batches against a SavedModel's requests.

A search step over a batch costs about `overhead + rows` units (rows: sentences, padded to the
next power of two as the buckets pad them), and a batch runs until its longest output ends. Given
the source lines, the decoder's outputs for them (each output's length is what its search ran:
its subword tokens + EOS) and the model's SentencePiece vocabulary, this prints each batching's
cost relative to the decoder's (all lines sorted by source length, batches of `--decoder_batch`):

    python scripts/batching_cost.py --vocab=runs/base_bench/vocab.model \
      --sources=../shared/data/multi30k/test_2016_flickr.en --outputs=decoded.de

(`scripts/bench_decode.py --model_dir=...` writes the decoder's outputs; docs/performance.md
gives the figures and where `--overhead` came from.) Counts, not timings: it runs in a second.
"""

import argparse
import heapq

import numpy as np
import sentencepiece as spm


def padded(n):
  return 2 ** int(np.ceil(np.log2(max(n, 1))))


def batches_cost(batches, out_lengths, overhead):
  """Sum over batches of (overhead + padded rows) x the batch's longest output."""
  return sum((overhead + padded(len(b))) * out_lengths[b].max() for b in batches if len(b))


def sorted_within(rows, keys):
  return rows[np.argsort(keys[rows], kind="stable")]


def split(rows, size):
  return [rows[i:i + size] for i in range(0, len(rows), size)]


def requests(count, size):
  return split(np.arange(count), size)


def dynamic_split(rows, src_lengths, overhead, largest):
  """Split points of `rows` (sorted by source length) minimising the cost predicted from source
  lengths (what a graph knows before decoding); returns the batches."""
  n = len(rows)
  best, start = [0.0] + [np.inf] * n, [0] * (n + 1)
  for end in range(1, n + 1):
    for begin in range(max(0, end - largest), end):
      cost = best[begin] + (overhead + padded(end - begin)) * src_lengths[rows[end - 1]]
      if cost < best[end]:
        best[end], start[end] = cost, begin
  batches, end = [], n
  while end > 0:
    batches.append(rows[start[end]:end])
    end = start[end]
  return batches


def refill_steps(rows, out_lengths, slots):
  """Steps until `rows` are all decoded by `slots` slots, each taking the next sentence (longest
  source first) as soon as its own ends."""
  ends = [0] * min(slots, len(rows))
  for row in rows:
    heapq.heappush(ends, heapq.heappop(ends) + out_lengths[row])
  return max(ends)


def shrinking_cost(batches, out_lengths, overhead, smallest):
  """Sum over batches of each step's overhead + rows, the rows halving (rounded up) while the
  sentences still running fit in half of them, down to `smallest` (the decode hparam
  `shrink_batch`: `t2t_lite.decoding.shrinking`); a batch starts at its padded size."""
  total = 0.0
  for batch in batches:
    lengths, size = out_lengths[batch], padded(len(batch))
    for step in range(int(lengths.max()) if len(batch) else 0):
      running = int((lengths > step).sum())
      while size > 1 and (size + 1) // 2 >= max(running, smallest):
        size = (size + 1) // 2
      total += overhead + size
  return total


def table(src_lengths, out_lengths, overhead, decoder_batch, request, sub_batches, shrink_to=4):
  count = len(src_lengths)
  by_source = np.argsort(src_lengths, kind="stable")
  decoder = batches_cost(split(by_source, decoder_batch), out_lengths, overhead)
  rows = []

  def add(name, cost):
    rows.append((name, cost / decoder))

  add(f"decoder: all lines sorted by source length, batches of {decoder_batch}", decoder)
  for sub in sub_batches:
    add(f"requests of {request}, sorted inside, sub-batches of {sub}", batches_cost(
        [b for r in requests(count, request) for b in split(sorted_within(r, src_lengths), sub)],
        out_lengths, overhead))
  add(f"requests of {request}, split points by source length (dynamic programming)", batches_cost(
      [b for r in requests(count, request)
       for b in dynamic_split(sorted_within(r, src_lengths), src_lengths, overhead, request)],
      out_lengths, overhead))
  add(f"requests of {request}, sorted by true output length (oracle), sub-batches of "
      f"{decoder_batch}", batches_cost(
          [b for r in requests(count, request) for b in split(sorted_within(r, out_lengths),
                                                               decoder_batch)],
          out_lengths, overhead))
  slots = decoder_batch
  add(f"requests of {request}, {slots} slots refilled as sentences finish", sum(
      (overhead + min(slots, len(r))) * refill_steps(r[np.argsort(-src_lengths[r], kind="stable")],
                                                     out_lengths, slots)
      for r in requests(count, request)))
  add(f"decoder, {slots} slots refilled over the whole file", (overhead + slots) * refill_steps(
      by_source[::-1], out_lengths, slots))
  sub = decoder_batch
  add(f"requests of {request}, sorted inside, sub-batches of {sub} halved as their sentences end, "
      f"down to {shrink_to} (shrink_batch={shrink_to})", shrinking_cost(
          [b for r in requests(count, request) for b in split(sorted_within(r, src_lengths), sub)],
          out_lengths, overhead, shrink_to))
  # A step costs overhead + the rows still running: each sentence's rows leave the batch when it
  # ends (CTranslate2's way), so a request costs overhead x its longest output + every output.
  add(f"requests of {request}, each sentence dropped from the batch when it ends", sum(
      overhead * out_lengths[r].max() + out_lengths[r].sum() for r in requests(count, request)))
  return rows


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--vocab", required=True, help="the model's SentencePiece model (vocab.model)")
  p.add_argument("--sources", required=True)
  p.add_argument("--outputs", required=True, help="the decoder's outputs, line for line")
  p.add_argument("--overhead", type=float, default=7.5, help="a step's fixed cost, in rows")
  p.add_argument("--decoder_batch", type=int, default=32)
  p.add_argument("--request", type=int, default=64)
  p.add_argument("--sub_batches", default="8,16,32,64")
  p.add_argument("--shrink_to", type=int, default=4,
                 help="the shrinking sub-batches' smallest size (decode hparam shrink_batch)")
  args = p.parse_args(argv)
  sp = spm.SentencePieceProcessor(model_file=args.vocab)
  with open(args.sources, encoding="utf-8") as f:
    sources = f.read().splitlines()
  with open(args.outputs, encoding="utf-8") as f:
    outputs = f.read().splitlines()
  if len(sources) != len(outputs):
    p.error(f"{args.sources} has {len(sources)} lines, {args.outputs} {len(outputs)}: "
            "give the decoder's outputs of exactly these lines")
  src_lengths = np.array([len(sp.encode(s)) + 1 for s in sources])
  out_lengths = np.array([len(sp.encode(s)) + 1 for s in outputs])
  print(f"{len(sources)} lines; step cost {args.overhead:g} + rows")
  print("| batching | cost, relative to the decoder's |\n|---|---|")
  for name, ratio in table(src_lengths, out_lengths, args.overhead, args.decoder_batch,
                           args.request, [int(s) for s in args.sub_batches.split(",")],
                           args.shrink_to):
    print(f"| {name} | {ratio:.2f} |")


if __name__ == "__main__":
  main()
