"""scripts/batching_cost.py: the batching cost model behind docs/performance.md's table."""

import importlib.util
import pathlib

import numpy as np
import pytest

_path = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "batching_cost.py"
_spec = importlib.util.spec_from_file_location("batching_cost", _path)
bc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bc)


def simulated_refill(lengths, slots):
  """Step by step: each slot holds a sentence's remaining steps; a free slot takes the next."""
  queue, running, steps = list(lengths), [], 0
  while queue or running:
    while queue and len(running) < slots:
      running.append(queue.pop(0))
    running = [r - 1 for r in running if r > 1]
    steps += 1
  return steps


def test_refill_steps_equal_a_step_by_step_simulation():
  rng = np.random.default_rng(0)
  for _ in range(50):
    lengths = rng.integers(1, 30, size=rng.integers(1, 70))
    slots = int(rng.integers(1, 40))
    rows = np.arange(len(lengths))
    assert bc.refill_steps(rows, lengths, slots) == simulated_refill(list(lengths), slots)


def test_costs_count_padded_rows_times_the_longest_output():
  out = np.array([3, 5, 2, 9, 4])
  # (1 + 4) * 9 for one batch of 3 padded to 4, plus (1 + 2) * 4 for the pair.
  assert bc.batches_cost([np.array([0, 1, 3]), np.array([2, 4])], out, 1.0) == 5 * 9 + 3 * 4


def test_dynamic_split_never_predicts_more_than_fixed_sub_batches():
  rng = np.random.default_rng(1)
  src = rng.integers(2, 40, size=64)
  rows = bc.sorted_within(np.arange(64), src)
  predicted = lambda batches: bc.batches_cost(batches, src, 7.5)  # noqa: E731
  best = predicted(bc.dynamic_split(rows, src, 7.5, 64))
  assert sorted(np.concatenate(bc.dynamic_split(rows, src, 7.5, 64))) == list(range(64))
  for size in (8, 16, 32, 64):
    assert best <= predicted(bc.split(rows, size))


def test_table_with_equal_lengths_makes_sorting_useless():
  lengths = np.full(128, 10)
  rows = dict(bc.table(lengths, lengths, 7.5, 32, 64, [32]))
  assert rows["decoder: all lines sorted by source length, batches of 32"] == 1.0
  assert rows["requests of 64, sorted inside, sub-batches of 32"] == 1.0


def test_dropping_ended_sentences_costs_each_step_its_running_rows():
  # One request: outputs of 3 and 5 steps, overhead 1: steps 1-3 run 2 rows (3 units each), steps
  # 4-5 one (2 each): 13; the decoder's one batch of 2 runs 5 steps at 1 + 2 (15).
  rows = dict(bc.table(np.array([4, 6]), np.array([3, 5]), 1.0, 32, 64, [32]))
  assert rows["requests of 64, each sentence dropped from the batch when it ends"] == 13 / 15


def test_shrinking_sub_batches_halve_as_their_sentences_end():
  # One request of 5 sentences, outputs of 1, 1, 2, 2 and 6 steps, overhead 1, down to 2 rows: the
  # sub-batch is padded to 8; step 1 runs 8 rows (5 running), step 2 4 (3 running), steps 3-6 2
  # (one running, but never below 2): 9 + 5 + 4 * 3 = 26 against the decoder's 6 steps of 1 + 8.
  rows = dict(bc.table(np.array([3, 3, 3, 3, 3]), np.array([1, 1, 2, 2, 6]), 1.0, 32, 64, [32], 2))
  assert rows["requests of 64, sorted inside, sub-batches of 32 halved as their sentences end, "
              "down to 2 (shrink_batch=2)"] == 26 / 54


def test_dynamic_split_finds_the_cheapest_split_points():
  """Against brute force: every way to cut a request (sorted by source length) into consecutive
  batches of at most `largest` rows; the split's predicted cost (source lengths standing in for
  the outputs) must be the cheapest of them all, not only no worse than fixed sizes."""
  def cheapest(lengths, largest, overhead):
    if not len(lengths):
      return 0.0
    return min((overhead + bc.padded(size)) * lengths[size - 1]
               + cheapest(lengths[size:], largest, overhead)
               for size in range(1, min(largest, len(lengths)) + 1))

  rng = np.random.default_rng(2)
  for _ in range(30):
    src = rng.integers(1, 40, size=int(rng.integers(1, 11)))
    rows = bc.sorted_within(np.arange(len(src)), src)
    largest, overhead = int(rng.integers(1, 6)), float(rng.choice([0.5, 3.0, 7.5]))
    batches = bc.dynamic_split(rows, src, overhead, largest)
    assert sorted(np.concatenate(batches)) == list(range(len(src)))
    assert all(1 <= len(b) <= largest for b in batches)
    assert bc.batches_cost(batches, src, overhead) == cheapest(src[rows], largest, overhead)


def test_refilled_slots_rows_equal_a_step_by_step_simulation():
  """The two rows of refilled slots, each step costing overhead + the slots (a request with fewer
  sentences than slots: only its sentences), against `simulated_refill`: each request's
  sentences longest source first; the whole file longest source first, in one run of the slots.
  Relative to the decoder's cost, its batches of `slots` over the lines sorted by source length
  (shortest first), counted here by hand."""
  rng = np.random.default_rng(3)
  src, out = rng.integers(1, 50, size=150), rng.integers(1, 40, size=150)
  overhead, slots, request = 2.0, 8, 64
  by_source = sorted(range(150), key=lambda i: src[i])          # stable: ties in line order
  decoder = sum((overhead + bc.padded(len(by_source[i:i + slots])))
                * max(out[by_source[i:i + slots]]) for i in range(0, 150, slots))
  per_request = 0.0
  for first in range(0, 150, request):                          # requests of 64, 64 and 22
    lines = range(first, min(first + request, 150))
    longest_first = sorted(lines, key=lambda i: -src[i])
    per_request += (overhead + min(slots, len(lines))) * simulated_refill(list(out[longest_first]), slots)
  whole_file = (overhead + slots) * simulated_refill(list(out[by_source[::-1]]), slots)
  rows = dict(bc.table(src, out, overhead, slots, request, [slots]))
  assert rows[f"requests of {request}, {slots} slots refilled as sentences finish"] == pytest.approx(
      per_request / decoder)
  assert rows[f"decoder, {slots} slots refilled over the whole file"] == pytest.approx(whole_file / decoder)
  # A request of 3 sentences in 4 slots pays for 3 rows a step: 5 steps (its longest output).
  rows = dict(bc.table(np.array([1, 3, 2]), np.array([5, 2, 4]), 1.0, 4, 64, [4]))
  assert rows["requests of 64, 4 slots refilled as sentences finish"] == (1 + 3) * 5 / ((1 + 4) * 5)
