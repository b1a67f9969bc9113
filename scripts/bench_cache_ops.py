"""The decoding cache's two operations alone, each against the form it replaced, in one run.

    python scripts/bench_cache_ops.py                   # both parts, base's shapes
    python scripts/bench_cache_ops.py --part=products   # or --part=writes

`products`: the attention scores of a decoding step, `q k^T` with the keys stored [B, H, entries,
d] (what greedy and the tiled cache keep) against `q kt` with them stored transposed [B, H, d,
entries] (what a cache shared by the beams keeps, `MultiHeadAttention`), 12 products (a 6-layer
decoder's self- and encoder-decoder attention) per step, for `--queries` query rows per sentence
(the beams sharing a cache: 4; greedy: 1) against each of `--entries`.

`writes`: the refill search's per-row cache write of one step (each slot at its own step), the
select over the whole cache (`write_group_rows`, which reads and writes all of it) against one
slice per row in place (`write_row_slices`, what the search now uses for a step), for 12 caches
(6 layers' keys, transposed, and values) of `--slots` slots x beam `--queries` at each of
`--positions`; the caches written by both are compared.

XLA-compiled loops of `--steps` steps; each form is timed in interleaved rounds and reports its
best (ms per step) and the ratio of the old form to the new.
"""

import argparse

import benchmarking  # noqa: F401  (before TensorFlow: its environment)
import numpy as np
import tensorflow as tf
from benchmarking import milliseconds

from t2t_lite import cpu
from t2t_lite.layers.multi_head_attention import write_group_rows, write_row_slices

CACHES = 12  # 6 decoder layers x (self-attention, encoder-decoder attention), or x (keys, values)


def step_loop(step_fn, steps):
  """An XLA-compiled loop of `steps` calls of step_fn(i, state) -> state."""
  def run(state):
    return tf.while_loop(lambda i, s: i < steps, lambda i, s: (i + 1, step_fn(i, s)), (0, state))[1]
  return tf.function(run, jit_compile=True)


def time_forms(forms, steps, rounds):
  """{name: ms per step} of {name: (compiled loop, its input)}, interleaved."""
  calls = milliseconds({name: lambda f=f, x=x: tf.nest.map_structure(lambda t: t.numpy(), f(x))
                        for name, (f, x) in forms.items()}, repeats=3, rounds=rounds)
  return {name: ms / steps for name, ms in calls.items()}


def products(batch, heads, depth, queries, entries, steps, rounds):
  """ms per step of `q k^T` (keys [B, H, L, d]) and `q kt` (keys [B, H, d, L])."""
  rng = np.random.default_rng(0)
  keys = [rng.standard_normal((batch, heads, entries, depth), dtype=np.float32) for _ in range(CACHES)]
  plain = [tf.constant(k) for k in keys]
  transposed = [tf.constant(np.ascontiguousarray(np.swapaxes(k, -1, -2))) for k in keys]
  q = tf.constant(rng.standard_normal((batch, heads, queries, depth), dtype=np.float32))

  def scores(product):
    def step(_, q):
      for i in range(CACHES):  # a dependence on every product, so none is dropped
        q = q + tf.reduce_sum(product(q, i)) * 1e-9
      return q
    return step

  forms = {"q k^T": (step_loop(scores(lambda q, i: tf.matmul(q, plain[i], transpose_b=True)), steps), q),
           "q kt": (step_loop(scores(lambda q, i: tf.matmul(q, transposed[i])), steps), q)}
  a, b = (f(x).numpy() for f, x in forms.values())
  np.testing.assert_allclose(a, b, rtol=1e-5)  # the same scores, summed
  return time_forms(forms, steps, rounds)


def writes(slots, heads, depth, group, positions, steps, rounds):
  """ms per step of the select and of the row slices; and whether they wrote the same caches."""
  rng = np.random.default_rng(0)
  new = tf.constant(rng.standard_normal((slots, heads, 1, group, depth), dtype=np.float32))
  new_keys = tf.reshape(tf.transpose(new, (0, 1, 4, 2, 3)), (slots, heads, depth, group))  # [S, H, d, g]
  new_values = tf.reshape(new, (slots, heads, group, depth))                                # [S, H, g, d]
  half = CACHES // 2
  caches = ([tf.zeros((slots, heads, depth, positions * group)) for _ in range(half)]       # keys, kt
            + [tf.zeros((slots, heads, positions * group, depth)) for _ in range(half)])    # values

  def slot_steps(i):  # the slots at different steps, as refilled slots are
    return i + tf.range(slots) % 3

  def select(i, caches):
    step = tf.repeat(slot_steps(i), group)
    return [write_group_rows(c, new, step, keys_transposed=j < half) for j, c in enumerate(caches)]

  def row_slices(i, caches):
    start = slot_steps(i) * group
    written = [write_row_slices([caches[j], caches[half + j]], [new_keys, new_values], start, [3, 2])
               for j in range(half)]
    return [w[0] for w in written] + [w[1] for w in written]

  forms = {"select": (step_loop(select, steps), caches),
           "row slices": (step_loop(row_slices, steps), caches)}
  outputs = [[c.numpy() for c in f(x)] for f, x in forms.values()]
  same = all(np.array_equal(a, b) for a, b in zip(*outputs))
  return time_forms(forms, steps, rounds), same


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--part", choices=["products", "writes", "both"], default="both")
  parser.add_argument("--batch", type=int, default=64, help="sentences (products)")
  parser.add_argument("--slots", type=int, default=32, help="refill slots (writes)")
  parser.add_argument("--heads", type=int, default=8)
  parser.add_argument("--depth", type=int, default=64, help="channels per head")
  parser.add_argument("--queries", type=int, default=4, help="query rows per sentence: the beam")
  parser.add_argument("--entries", default="120,64,30",
                      help="cache entries the queries attend over (products)")
  parser.add_argument("--positions", default="32,116", help="cache positions per slot (writes)")
  parser.add_argument("--steps", type=int, default=20, help="steps in each compiled loop")
  parser.add_argument("--rounds", type=int, default=5)
  args = parser.parse_args()
  if min(args.batch, args.slots, args.heads, args.depth, args.queries, args.steps, args.rounds) < 1:
    parser.error("--batch, --slots, --heads, --depth, --queries, --steps and --rounds must be >= 1")
  try:
    entries = [int(n) for n in args.entries.split(",")]
    positions = [int(n) for n in args.positions.split(",")]
  except ValueError:
    parser.error("--entries and --positions take comma-separated integers, for example 120,64,30")
  print(cpu.describe())
  if args.part in ("products", "both"):
    print(f"\nattention scores, {CACHES} products a step: batch {args.batch}, {args.heads} heads of "
          f"{args.depth}, {args.queries} query rows per sentence (ms per step; old / new)")
    for n in entries:
      ms = products(args.batch, args.heads, args.depth, args.queries, n, args.steps, args.rounds)
      print(f"  {n:4d} entries: q k^T {ms['q k^T']:7.2f}  q kt {ms['q kt']:7.2f}  "
            f"{ms['q k^T'] / ms['q kt']:.2f}x")
  if args.part in ("writes", "both"):
    print(f"\nrefill per-row cache writes, {CACHES} caches: {args.slots} slots x beam {args.queries}, "
          f"{args.heads} heads of {args.depth} (ms per step; old / new)")
    for n in positions:
      ms, same = writes(args.slots, args.heads, args.depth, args.queries, n, args.steps, args.rounds)
      megabytes = CACHES * args.slots * args.queries * n * args.heads * args.depth * 4 / 1e6
      print(f"  {n:4d} positions ({megabytes:.0f} MB of caches): select {ms['select']:7.2f}  "
            f"row slices {ms['row slices']:7.2f}  {ms['select'] / ms['row slices']:.2f}x  "
            f"caches identical: {same}")


if __name__ == "__main__":
  main()
