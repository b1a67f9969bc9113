"""Beam search, greedy decoding and sampling, with scripted logits and a tiny recurrent "model".

Backend-agnostic (keras.ops + numpy): run with KERAS_BACKEND=tensorflow and KERAS_BACKEND=jax.
"""

import collections
import functools
import importlib
import itertools
import math

import keras
import numpy as np
import pytest
from keras import ops

from t2t_lite.decoding import beam_search as beam_search_lib
from t2t_lite.decoding.beam_search import (beam_search, gather_beams, length_penalty,
                                           run_beam_search, tile_to_beams, top_candidates)
from t2t_lite.decoding.gathers import gather, take_rows
from t2t_lite.decoding.sampling import (first_argmax, greedy_search, sampling_search,
                                        token_log_probs)
from t2t_lite.layers.checks import dim

pytestmark = pytest.mark.backend_independent

PAD, EOS, A, B, C = 0, 1, 2, 3, 4


def compiled(fn):
  """The function as the backend compiles it: tf.function (TensorFlow) or jax.jit (JAX)."""
  backend = keras.backend.backend()
  if backend == "tensorflow":
    return importlib.import_module("tensorflow").function(fn)
  if backend == "jax":
    return importlib.import_module("jax").jit(fn)
  return fn


def numpy(x):
  return ops.convert_to_numpy(x)


def on_accelerator():
  """Whether the backend computes on a GPU (the JAX pass on a GPU machine: docs/testing.md)."""
  if keras.backend.backend() == "jax":
    return importlib.import_module("jax").default_backend() != "cpu"
  if keras.backend.backend() == "tensorflow":
    return bool(importlib.import_module("tensorflow").config.list_logical_devices("GPU"))
  return False


def gnmt_score(log_prob, length, alpha):
  return log_prob / ((5.0 + length) / 6.0) ** alpha


def until_eos(ids):
  """The tokens up to and including the first EOS (all of them if none)."""
  ids = list(int(i) for i in ids)
  return tuple(ids[:ids.index(EOS) + 1]) if EOS in ids else tuple(ids)


# ---------------------------------------------------------------- scripted (Markov) logits


def markov_fn(rows_per_step, vocab=5):
  """Logits depending on the step and the last token only.

  rows_per_step: one dict per step: {last_token: {token: prob}}; unlisted tokens share what is
  left of the mass; an unlisted last token gets a uniform row. Returns (fn, log-prob table).
  """
  table = np.zeros((len(rows_per_step), vocab, vocab))
  for step, rows in enumerate(rows_per_step):
    for last in range(vocab):
      probs = dict(rows.get(last, {}))
      rest = [t for t in range(vocab) if t not in probs]
      left = 1.0 - sum(probs.values())
      probs.update({t: left / len(rest) for t in rest})
      table[step, last] = np.log(np.maximum([probs[t] for t in range(vocab)], 1e-12))
  table_tensor = ops.convert_to_tensor(table.astype("float32"))

  def fn(ids, step, cache):
    return ops.take(ops.take(table_tensor, step, axis=0), ids, axis=0), cache  # [n, vocab]
  return fn, table


def markov_log_prob(table, seq):
  last, total = PAD, 0.0
  for step, token in enumerate(seq):
    total += table[step, last, token]
    last = token
  return total


def test_finds_the_best_sequence_that_greedy_misses():
  # Greedy takes A (0.5) and then faces a flat distribution; B then EOS has probability 0.396.
  fn, table = markov_fn([{PAD: {A: 0.5, B: 0.4, EOS: 0.05, C: 0.04}},
                         {B: {EOS: 0.99}},
                         {}, {}])
  ids, scores = beam_search(fn, {}, batch_size=1, beam_size=3, vocab_size=5, max_decode_length=4,
                            alpha=0.6)
  ids, scores = numpy(ids), numpy(scores)
  assert ids.shape == (1, 3, 4) and scores.shape == (1, 3)
  assert ids[0, 0].tolist() == [B, EOS, PAD, PAD]
  np.testing.assert_allclose(scores[0, 0], gnmt_score(math.log(0.4 * 0.99), 2, 0.6), rtol=1e-5)
  assert np.all(np.diff(scores[0]) <= 0), "beams are sorted best first"
  greedy_ids, _ = greedy_search(fn, {}, batch_size=1, max_decode_length=4)
  assert numpy(greedy_ids)[0, 0] == A


LONG_OR_SHORT = [{PAD: {EOS: 0.5, A: 0.45}}, {A: {A: 0.935}}, {A: {A: 0.935}}, {A: {EOS: 0.935}},
                 {}]


@pytest.mark.parametrize("alpha,expected", [(0.0, [EOS]), (1.0, [A, A, A, EOS])])
def test_length_penalty_picks_short_or_long(alpha, expected):
  # [EOS] has log-prob -0.69; [A A A EOS] has -1.00 but length 4: -1.00 / 1.5 = -0.67 at alpha 1.
  fn, table = markov_fn(LONG_OR_SHORT)
  assert markov_log_prob(table, [EOS]) > markov_log_prob(table, [A, A, A, EOS])
  ids, scores = beam_search(fn, {}, 1, beam_size=2, vocab_size=5, max_decode_length=5, alpha=alpha)
  assert until_eos(numpy(ids)[0, 0]) == tuple(expected)
  np.testing.assert_allclose(
      numpy(scores)[0, 0],
      gnmt_score(markov_log_prob(table, expected), len(expected), alpha), rtol=1e-5)


def test_length_penalty_formula():
  np.testing.assert_allclose(numpy(length_penalty(7, 0.6)), (12 / 6) ** 0.6, rtol=1e-6)
  np.testing.assert_allclose(numpy(length_penalty(ops.convert_to_tensor([1, 10]), 0.0)), [1, 1])


# Step 0: EOS 0.3, A 0.6 (alive beats finished: go on). Step 1 after A: EOS 0.9, so the worst
# finished ([EOS], log 0.3) beats every alive hypothesis (at most log(0.6 * 0.05)) at alpha 0.
EARLY_STOP = [{PAD: {EOS: 0.3, A: 0.6}}, {A: {EOS: 0.9}}] + [{}] * 18


@pytest.mark.parametrize("stop_early,alpha,steps", [(True, 0.0, 2), (False, 0.0, 20)])
def test_early_termination_at_the_right_step(stop_early, alpha, steps):
  fn, _ = markov_fn(EARLY_STOP)
  state = run_beam_search(fn, {}, 1, beam_size=2, vocab_size=5, max_decode_length=20,
                          alpha=alpha, stop_early=stop_early)
  assert int(numpy(state.step)) == steps
  ids, _ = beam_search(fn, {}, 1, 2, 5, 20, alpha=alpha, stop_early=stop_early)
  assert until_eos(numpy(ids)[0, 0]) == (A, EOS)


def test_large_alpha_and_long_limit_delay_early_termination():
  # With alpha 2 and limit 20, alive log-probs divided by ((5 + 20) / 6) ** 2 = 17.4 stay above
  # the worst finished score for longer: the bound must hold for the longest possible output.
  fn, _ = markov_fn(EARLY_STOP)
  state = run_beam_search(fn, {}, 1, beam_size=2, vocab_size=5, max_decode_length=20, alpha=2.0)
  assert 2 < int(numpy(state.step)) < 20


def test_best_only_stops_once_the_best_is_final():
  # Alpha 2, limit 20, beam 2: [A, EOS] (log 0.54, score -0.45) and [EOS] (log 0.3, -1.20) finish
  # by step 2; the best alive one then holds log 0.015 (0.6 x 0.025) and loses log 5 a step.
  # T2T's rule for one beam stops once it, over the largest penalty ((5 + 20) / 6) ** 2 = 17.36,
  # falls below -0.45: step 5 (log 0.015 - 3 log 5 = -9.03, / 17.36 = -0.52); the n-best rule
  # waits for -1.20 x 17.36 = -20.8: step 13.
  fn, _ = markov_fn(EARLY_STOP)
  steps, results = {}, {}
  for best_only in (True, False):
    state = run_beam_search(fn, {}, 1, beam_size=2, vocab_size=5, max_decode_length=20, alpha=2.0,
                            best_only=best_only)
    steps[best_only] = int(numpy(state.step))
    results[best_only] = [numpy(t) for t in beam_search(fn, {}, 1, 2, 5, 20, alpha=2.0,
                                                        best_only=best_only)]
  assert steps == {True: 5, False: 13}
  for best_only in (True, False):
    ids, scores = results[best_only]
    assert until_eos(ids[0, 0]) == (A, EOS)
    np.testing.assert_allclose(scores[0, 0], gnmt_score(math.log(0.54), 2, 2.0), rtol=1e-5)


def test_the_finished_stop_ends_once_the_beam_has_ended():
  # The example above: [EOS] ends at step 1 and [A, EOS] at step 2, each the best or second best
  # candidate of its step, so with beam 2 the search stops at step 2, where T2T's bound waits
  # until step 5 (best only) or 13 (n-best). The best is the same here; the rule alone does not
  # promise that (see the reference test below).
  fn, _ = markov_fn(EARLY_STOP)
  for best_only in (True, False):
    state = run_beam_search(fn, {}, 1, beam_size=2, vocab_size=5, max_decode_length=20, alpha=2.0,
                            best_only=best_only, stop_when_finished=True)
    assert int(numpy(state.step)) == 2
  ids, scores = map(numpy, beam_search(fn, {}, 1, 2, 5, 20, alpha=2.0, stop_when_finished=True))
  assert [until_eos(row) for row in ids[0]] == [(A, EOS), (EOS,)]
  np.testing.assert_allclose(scores[0], [gnmt_score(math.log(0.54), 2, 2.0),
                                         gnmt_score(math.log(0.3), 1, 2.0)], rtol=1e-5)


@pytest.mark.parametrize("seed,alpha", [(11, 0.6), (12, 1.2), (13, 2.0)])
def test_best_only_keeps_the_best_beam_and_never_runs_longer(seed, alpha):
  # Sentences of a batch with their own limits, the rule given as a Python bool and as a tensor
  # argument of one compiled search: the best beam's ids and score are the n-best search's.
  model, limits, beam = TinyRecurrentModel(vocab=6, hidden=8, seed=seed), [4, 7, 9], 4
  cache = model.initial_cache(3, seed=seed + 1)
  lengths = np.asarray(limits, "int32")

  def run(best_only):
    state = run_beam_search(model.symbols_to_logits, cache, 3, beam, 6, 9, alpha=alpha,
                            decode_lengths=lengths, best_only=best_only)
    return int(numpy(state.step))
  assert run(True) <= run(False)
  search = compiled(lambda cache, lengths, best_only: beam_search(
      model.symbols_to_logits, cache, 3, beam, 6, 9, alpha=alpha, decode_lengths=lengths,
      best_only=best_only))
  full_ids, full_scores = map(numpy, search(cache, lengths, np.asarray(False)))
  for best_only in (True, np.asarray(True)):
    ids, scores = map(numpy, search(cache, lengths, best_only) if not isinstance(best_only, bool)
                      else beam_search(model.symbols_to_logits, cache, 3, beam, 6, 9, alpha=alpha,
                                       decode_lengths=lengths, best_only=True))
    np.testing.assert_array_equal(ids[:, 0], full_ids[:, 0])
    np.testing.assert_allclose(scores[:, 0], full_scores[:, 0], rtol=1e-6)
  plain_ids, _ = map(numpy, beam_search(model.symbols_to_logits, cache, 3, beam, 6, 9, alpha=alpha,
                                        decode_lengths=lengths))
  np.testing.assert_array_equal(plain_ids, full_ids)  # the default is the n-best rule


# ---------------------------------------------------------------- a tiny recurrent "model"


def reference_beam_search(model, h0, beam, limit, alpha, stop_when_finished):
  """T2T's algorithm in plain Python over the model's numpy twin, one sentence: each step keeps
  the 2 * beam best extensions; those ending in EOS join the finished set (the beam best by
  GNMT score), the beam best others stay alive. Stops at `limit`, at T2T's n-best bound, or
  (`stop_when_finished`) once `beam` hypotheses have ended among their step's `beam` best
  extensions (CTranslate2's count). Returns ([(score, tokens)] best first, finished ones then
  alive ones by log-probability, and the steps run)."""
  alive, finished, ended = [(0.0, (), h0)], [], 0
  for step in range(1, limit + 1):
    candidates = []
    for log_prob, prefix, h in alive:
      h_next, log_probs = model.log_probs(h, prefix[-1] if prefix else PAD, len(prefix))
      candidates += [(log_prob + log_probs[t], prefix + (t,), h_next) for t in range(model.vocab)]
    candidates = sorted(candidates, key=lambda c: -c[0])[:2 * beam]
    finished = sorted(finished + [(gnmt_score(lp, step, alpha), seq) for lp, seq, _ in candidates
                                  if seq[-1] == EOS], reverse=True)[:beam]
    alive = [c for c in candidates if c[1][-1] != EOS][:beam]
    ended += sum(seq[-1] == EOS for _, seq, _ in candidates[:beam])
    bound = finished and finished[-1][0] > alive[0][0] / ((5.0 + limit) / 6.0) ** alpha
    if bound or (stop_when_finished and ended >= beam):
      break
  return finished + [(lp, seq) for lp, seq, _ in alive][:beam - len(finished)], step


@pytest.mark.parametrize("seed,alpha", [(21, 0.6), (22, 1.2), (23, 2.0)])
def test_the_finished_stop_equals_a_plain_reference_and_never_runs_longer(seed, alpha):
  """`stop_when_finished` against the reference above: every slot's tokens and score, and the
  steps, for sentences of a batch with their own limits (compiled, as the translator runs it)."""
  model, limits, beam = TinyRecurrentModel(vocab=6, hidden=8, seed=seed), [4, 7, 9], 3
  cache = model.initial_cache(3, seed=seed + 1)
  lengths = np.asarray(limits, "int32")
  steps = {}
  for finished_rule in (True, False):
    state = run_beam_search(model.symbols_to_logits, cache, 3, beam, 6, 9, alpha=alpha,
                            decode_lengths=lengths, stop_when_finished=finished_rule)
    steps[finished_rule] = int(numpy(state.step))
  search = compiled(lambda cache, lengths: beam_search(
      model.symbols_to_logits, cache, 3, beam, 6, 9, alpha=alpha, decode_lengths=lengths,
      stop_when_finished=True))
  ids, scores = map(numpy, search(cache, lengths))
  reference_steps = []
  for b, limit in enumerate(limits):
    expected, ran = reference_beam_search(model, cache["layer_0"]["h"][b], beam, limit, alpha, True)
    reference_steps.append(ran)
    np.testing.assert_array_equal(ids[b], [seq + (PAD,) * (9 - len(seq)) for _, seq in expected])
    np.testing.assert_allclose(scores[b], [score for score, _ in expected], rtol=1e-4, atol=1e-5)
  assert steps[True] == max(reference_steps) <= steps[False]


class TinyRecurrentModel:
  """logits_t = U tanh(W h_{t-1} + E[token_{t-1}]) + step * bias: depends on the whole prefix.

  The hidden state lives in a nested cache; each sentence starts from its own h_0 (the
  "encoder output"), so sentences of a batch differ. `log_probs` is the numpy twin.
  """

  def __init__(self, vocab=4, hidden=6, seed=0):
    rng = np.random.default_rng(seed)
    self.vocab = vocab
    self.embed = rng.normal(size=(vocab, hidden)).astype("float32") * 1.5
    self.w = rng.normal(size=(hidden, hidden)).astype("float32") * 0.8
    self.out = rng.normal(size=(hidden, vocab)).astype("float32") * 1.5
    self.bias = rng.normal(size=(vocab,)).astype("float32") * 0.3

  def initial_cache(self, batch, seed=1):
    h0 = np.random.default_rng(seed).normal(size=(batch, self.w.shape[0])).astype("float32")
    return {"layer_0": {"h": h0}}

  def symbols_to_logits(self, ids, step, cache):
    h = ops.tanh(ops.matmul(cache["layer_0"]["h"], self.w) + ops.take(self.embed, ids, axis=0))
    logits = ops.matmul(h, self.out) + ops.cast(step, "float32") * self.bias
    return logits, {"layer_0": {"h": h}}

  def log_probs(self, h, last, step):
    h = np.tanh(h.astype("float64") @ self.w + self.embed[last])
    logits = h @ self.out + step * self.bias
    return h, logits - np.logaddexp.reduce(logits)

  def brute_force(self, h0, max_length, alpha):
    """All (score, sequence) ending in EOS within max_length, best first."""
    results = []

    def extend(prefix, h, log_prob):
      h, log_probs = self.log_probs(h, prefix[-1] if prefix else PAD, len(prefix))
      for token in range(self.vocab):
        total = log_prob + log_probs[token]
        if token == EOS:
          results.append((gnmt_score(total, len(prefix) + 1, alpha), prefix + (EOS,)))
        elif len(prefix) + 1 < max_length:
          extend(prefix + (token,), h, total)
    extend((), h0, 0.0)
    return sorted(results, reverse=True)

  def greedy(self, h0, max_length):
    prefix, h, total = (), h0, 0.0
    while len(prefix) < max_length and EOS not in prefix:
      h, log_probs = self.log_probs(h, prefix[-1] if prefix else PAD, len(prefix))
      prefix += (int(np.argmax(log_probs)),)
      total += log_probs[prefix[-1]]
    return prefix, total


@pytest.mark.parametrize("seed,alpha", [(0, 0.6), (1, 0.0), (2, 1.5)])
def test_large_beam_equals_exhaustive_search(seed, alpha):
  # Vocab 4, length <= 5: 1 + 3 + 9 + 27 + 81 = 121 sequences end in EOS. A beam of 256 keeps
  # every alive prefix (at most 81) and its 2 * 256 candidates cover all 81 * 4 extensions, so
  # beam search must find every sequence, with the brute-force score.
  model, batch, max_length, beam = TinyRecurrentModel(seed=seed), 2, 5, 256
  cache = model.initial_cache(batch, seed=seed + 10)
  search = compiled(lambda cache: beam_search(model.symbols_to_logits, cache, batch, beam, 4,
                                              max_length, alpha=alpha, stop_early=False))
  ids, scores = map(numpy, search(cache))
  for b in range(batch):
    expected = model.brute_force(cache["layer_0"]["h"][b], max_length, alpha)
    assert len(expected) == 121
    assert until_eos(ids[b, 0]) == expected[0][1]
    np.testing.assert_allclose(scores[b, :121], [s for s, _ in expected], rtol=1e-4, atol=1e-5)
    found = {until_eos(row): score for row, score in zip(ids[b, :121], scores[b, :121])}
    assert sorted(found) == sorted(seq for _, seq in expected)
    for score, seq in expected:
      np.testing.assert_allclose(found[seq], score, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seed,alpha,best_only", [(3, 0.6, False), (4, 1.0, False), (3, 0.6, True),
                                                  (4, 1.0, True)])
def test_stop_early_keeps_the_exhaustive_best(seed, alpha, best_only):
  model, max_length = TinyRecurrentModel(seed=seed), 5
  cache = model.initial_cache(1, seed=seed)
  ids, scores = beam_search(model.symbols_to_logits, cache, 1, 256, 4, max_length, alpha=alpha,
                            best_only=best_only)
  best_score, best = model.brute_force(cache["layer_0"]["h"][0], max_length, alpha)[0]
  assert until_eos(numpy(ids)[0, 0]) == best
  np.testing.assert_allclose(numpy(scores)[0, 0], best_score, rtol=1e-4)


def test_per_sentence_decode_lengths():
  model, limits, beam = TinyRecurrentModel(seed=5), [2, 3, 5], 64
  cache = model.initial_cache(3, seed=6)
  search = compiled(lambda cache, lengths: beam_search(
      model.symbols_to_logits, cache, 3, beam, 4, max_decode_length=6, alpha=0.6,
      decode_lengths=lengths))
  ids, scores = map(numpy, search(cache, np.asarray(limits, "int32")))
  for b, limit in enumerate(limits):
    assert not ids[b, :, limit:].any(), f"sentence {b} wrote past its limit {limit}"
    best_score, best = model.brute_force(cache["layer_0"]["h"][b], limit, 0.6)[0]
    assert until_eos(ids[b, 0]) == best
    np.testing.assert_allclose(scores[b, 0], best_score, rtol=1e-4)
    # Same result as searching that sentence alone: batch-mates do not change it.
    alone = {"layer_0": {"h": cache["layer_0"]["h"][b:b + 1]}}
    alone_ids, alone_scores = beam_search(model.symbols_to_logits, alone, 1, beam, 4, limit,
                                          alpha=0.6)
    np.testing.assert_array_equal(ids[b, :, :limit], numpy(alone_ids)[0])
    np.testing.assert_allclose(scores[b], numpy(alone_scores)[0], rtol=1e-6)


def test_sentence_that_finishes_nothing_returns_alive_hypotheses():
  """EOS is never likely enough to be among the candidates: T2T returns the alive hypotheses,
  best first by raw log-probability: the two best of all 4 ** 3 sequences without EOS, by
  enumeration. Their log-probabilities differ (A A A 0.21, B A A 0.126), so a fallback that
  skipped a hypothesis or filled the slots in another order fails."""
  fn, table = markov_fn([{t: {EOS: 1e-9, A: a, B: b} for t in range(5)}
                         for a, b in ((0.5, 0.3), (0.6, 0.25), (0.7, 0.2))])
  ids, scores = beam_search(fn, {}, 1, beam_size=2, vocab_size=5, max_decode_length=3)
  ids, scores = numpy(ids), numpy(scores)
  assert EOS not in ids
  best = sorted(itertools.product([PAD, A, B, C], repeat=3),
                key=lambda seq: -markov_log_prob(table, seq))[:2]
  assert best == [(A, A, A), (B, A, A)]
  assert [tuple(row) for row in ids[0]] == best
  np.testing.assert_allclose(scores[0], [markov_log_prob(table, seq) for seq in best], rtol=1e-5)


def test_beam_one_equals_greedy():
  model = TinyRecurrentModel(seed=7)
  cache = model.initial_cache(4, seed=8)
  lengths = np.asarray([1, 3, 5, 6], "int32")
  beam_ids, beam_scores = beam_search(model.symbols_to_logits, cache, 4, 1, 4, 6,
                                      decode_lengths=lengths)
  greedy_ids, greedy_scores = greedy_search(model.symbols_to_logits, cache, 4, 6,
                                            decode_lengths=lengths)
  np.testing.assert_array_equal(numpy(beam_ids)[:, 0], numpy(greedy_ids))
  np.testing.assert_allclose(numpy(beam_scores)[:, 0], numpy(greedy_scores))
  for b, limit in enumerate(lengths):
    expected, log_prob = model.greedy(cache["layer_0"]["h"][b], limit)
    row = numpy(greedy_ids)[b]
    assert tuple(row[:len(expected)]) == expected and not row[len(expected):].any()
    np.testing.assert_allclose(numpy(greedy_scores)[b], log_prob, rtol=1e-5)


def reference_candidates(logits, alive_log_probs, k):
  """The k best of log_softmax + alive over the materialised [batch, beam * vocab] scores."""
  log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1) + alive_log_probs[..., None]
  return ops.top_k(ops.reshape(log_probs, (ops.shape(logits)[0], -1)), k)


@pytest.mark.parametrize("vocab, k, chunk", [(8000, 8, None), (32000, 8, None), (4097, 8, None),
                                             (3000, 2, 128), (1200, 8, 100), (37, 8, None)])
def test_top_candidates_equal_top_k_of_the_log_probs(vocab, k, chunk):
  """Chunks that divide the vocabulary (8000 -> 125), padded ones (4097, a prime; 3000 with 128),
  and the plain path (37); values and indices exactly equal, with and without a mask."""
  rng = np.random.default_rng(vocab)
  logits = rng.normal(size=(4, 4, vocab)).astype("float32") * 3
  logits[2, 1, rng.integers(0, vocab, 6)] = 40.0      # the winners crowd into few chunks
  alive = rng.normal(size=(4, 4)).astype("float32") * 5
  alive[1, 1:] = -np.inf                              # empty beams (as at step 0)
  alive[3, :2] = -np.inf
  if vocab > 1100:  # a tie across chunks ranked out of index order: the lower index comes first
    logits[0, 0, [5, 1000, 1001]] = [20.0, 45.0, 20.0]
    alive[0, 1:] = -np.inf
  logits, alive = ops.convert_to_tensor(logits), ops.convert_to_tensor(alive)
  values, index = top_candidates(logits, alive, k, chunk)
  expected_values, expected_index = reference_candidates(logits, alive, k)
  # Bit for bit on a CPU; a GPU's fused log-softmax of the reference may differ in the last bit.
  assert_values_equal = (functools.partial(np.testing.assert_allclose, rtol=1e-6)
                         if on_accelerator() else np.testing.assert_array_equal)
  assert_values_equal(numpy(values), numpy(expected_values))
  np.testing.assert_array_equal(numpy(index), numpy(expected_index))
  # A mask removes candidates (the winners among them) but keeps the unmasked log-probabilities.
  mask = rng.random(size=(4, 4, vocab)) < 0.3
  mask[2, 1] = False
  values, index = top_candidates(logits, alive, k, chunk, mask=ops.convert_to_tensor(mask))
  log_probs = ops.log_softmax(logits, axis=-1) + alive[..., None]
  expected_values, expected_index = ops.top_k(
      ops.reshape(ops.where(mask, log_probs, -np.inf), (4, -1)), k)
  assert_values_equal(numpy(values), numpy(expected_values))
  np.testing.assert_array_equal(numpy(index), numpy(expected_index))


def test_beam_search_over_a_large_vocabulary_is_unchanged_by_the_chunked_candidates(monkeypatch):
  """Vocab 3000, beam 4: the chunked candidate search agrees with the materialised top_k."""
  rng = np.random.default_rng(3)
  table = ops.convert_to_tensor(rng.normal(size=(3000, 3000)).astype("float32") * 3)

  def symbols_to_logits(ids, step, cache):
    return ops.take(table, ids, axis=0) + cache["bias"], cache

  cache = {"bias": ops.convert_to_tensor(rng.normal(size=(2, 3000)).astype("float32"))}
  chunked = beam_search(symbols_to_logits, cache, 2, 4, 3000, 6, alpha=0.6)
  monkeypatch.setattr(beam_search_lib, "top_candidates",
                      lambda logits, alive, k, mask=None: reference_candidates(logits, alive, k))
  plain = beam_search(symbols_to_logits, cache, 2, 4, 3000, 6, alpha=0.6)
  np.testing.assert_array_equal(numpy(chunked[0]), numpy(plain[0]))
  np.testing.assert_array_equal(numpy(chunked[1]), numpy(plain[1]))


# ---------------------------------------------------------------- sampling


def test_sampling_follows_the_tempered_distribution_and_top_k():
  logits = np.asarray([0.0, 0.5, 1.0, 2.0, -1.0], "float32")
  fn = lambda ids, step, cache: (ops.tile(logits[None], (ops.shape(ids)[0], 1)), cache)
  n, temperature = 4000, 0.7
  ids, _ = sampling_search(fn, {}, n, max_decode_length=1, temperature=temperature, seed=3)
  frequencies = np.bincount(numpy(ids)[:, 0], minlength=5) / n
  expected = np.exp(logits / temperature) / np.exp(logits / temperature).sum()
  np.testing.assert_allclose(frequencies, expected, atol=0.03)
  top2, _ = sampling_search(fn, {}, n, 1, temperature=1.0, top_k=2, seed=3)
  assert set(np.unique(numpy(top2))) == {2, 3}


def test_sampling_draws_a_new_random_number_at_every_step():
  """Two steps whose logits ignore the last token: the pairs are independent, so each pair's
  count is binomial with the product of the two steps' probabilities, and falls within 5 of its
  standard deviations. One random number per sentence reused at both steps picks the same
  quantile of both distributions (A A, B A, C B or C C; never A C): the one-step test missed it."""
  step_probs = [{A: 0.2, B: 0.3, C: 0.5}, {A: 0.5, B: 0.3, C: 0.2}]   # no PAD, no EOS
  fn, table = markov_fn([{last: probs for last in range(5)} for probs in step_probs])
  n = 4000
  ids, _ = sampling_search(fn, {}, n, max_decode_length=2, temperature=1.0, seed=7)
  counts = collections.Counter(map(tuple, numpy(ids).tolist()))
  pairs = list(itertools.product((A, B, C), repeat=2))
  assert set(counts) <= set(pairs)
  for pair in pairs:
    p = math.exp(markov_log_prob(table, pair))                   # 0.2 * 0.5 for (A, A), ...
    assert abs(counts[pair] - n * p) <= 5 * math.sqrt(n * p * (1 - p)), (pair, counts[pair], n * p)


@pytest.mark.parametrize("run", [lambda f, *a: f(*a), lambda f, *a: compiled(f)(*a)],
                         ids=["eager", "compiled"])
def test_greedy_pick_and_score_equal_numpy_argmax_and_log_softmax(run):
  """The greedy step's argmax (max, then the first index holding it) and the chosen tokens'
  log-probabilities (without the [batch, vocab] log-softmax) against numpy: ties go to the first
  index, a row of -inf (every token forbidden) to 0, large logits stay finite."""
  rng = np.random.default_rng(5)
  logits = rng.normal(size=(6, 300)).astype("float32") * 4
  logits[1, [7, 40, 299]] = 30.0                    # a tie: the first index wins
  logits[2] = 0.5                                   # all equal
  logits[3, ::2] = -np.inf                          # a constraint's forbidden tokens
  logits[4] = -np.inf
  logits[5] += 1e4                                  # large logits (shifted by the max)
  tokens = numpy(run(first_argmax, logits))
  np.testing.assert_array_equal(tokens, np.argmax(logits, axis=-1))
  chosen = np.array([3, 7, 0, 2, 0, 150], "int32")   # any tokens, not only the argmax
  finite = np.isfinite(logits).any(axis=1)           # row 4's log-probs are undefined (nan)
  shifted = logits[finite] - logits[finite].max(axis=1, keepdims=True)
  log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
  expected = log_softmax[np.arange(finite.sum()), chosen[finite]]
  got = numpy(run(token_log_probs, logits, chosen))
  np.testing.assert_allclose(got[finite], expected, rtol=1e-6, atol=1e-5)
  assert got[3] == -np.inf and np.isfinite(got[[0, 1, 2, 5]]).all()


def test_sampling_is_reproducible_and_top_1_is_greedy():
  model = TinyRecurrentModel(seed=9)
  cache = model.initial_cache(8, seed=9)
  sample = compiled(lambda cache: sampling_search(model.symbols_to_logits, cache, 8, 6,
                                                  temperature=1.0, seed=42))
  first, second = numpy(sample(cache)[0]), numpy(sample(cache)[0])
  np.testing.assert_array_equal(first, second)
  for row in first:
    assert not row[len(until_eos(row)):].any(), "PAD after EOS"
  top1, _ = sampling_search(model.symbols_to_logits, cache, 8, 6, temperature=1.0, top_k=1)
  greedy, _ = greedy_search(model.symbols_to_logits, cache, 8, 6)
  np.testing.assert_array_equal(numpy(top1), numpy(greedy))


def test_a_seed_given_as_an_argument_samples_as_that_int():
  """A seed that is an argument of the compiled search (a scalar int32 tensor: one program for
  every seed, as the Translator runs it) draws the samples of that int seed, seed by seed."""
  model = TinyRecurrentModel(seed=9)
  cache = model.initial_cache(8, seed=9)
  sample = compiled(lambda cache, seed: sampling_search(model.symbols_to_logits, cache, 8, 6,
                                                        temperature=2.0, seed=seed)[0])
  drawn = {}
  for seed in (42, 43, 2 ** 31 - 5):
    by_argument = numpy(sample(cache, ops.convert_to_tensor(seed, "int32")))
    by_int, _ = sampling_search(model.symbols_to_logits, cache, 8, 6, temperature=2.0, seed=seed)
    np.testing.assert_array_equal(by_argument, numpy(by_int))
    drawn[seed] = by_argument.tolist()
  assert drawn[42] != drawn[43]


# ---------------------------------------------------------------- helpers and arguments


def test_tile_and_gather_beams():
  cache = {"a": np.arange(6, dtype="float32").reshape(2, 3), "b": {"c": np.asarray([7, 8])}}
  tiled = tile_to_beams(cache, 2)
  np.testing.assert_array_equal(numpy(tiled["b"]["c"]), [7, 7, 8, 8])
  picked = gather_beams(tiled, np.asarray([[1, 1, 0], [0, 1, 1]]), beam_size=2)
  np.testing.assert_array_equal(numpy(picked["a"])[:, 0], [0, 0, 0, 3, 3, 3])
  assert numpy(picked["b"]["c"]).tolist() == [7, 7, 7, 8, 8, 8]


def test_the_searches_gathers_equal_numpys_in_and_out_of_a_compiled_function():
  """`take_rows` (the rows of each sentence) and `gather` (one axis) against numpy's
  take_along_axis and take, eagerly and compiled; and `dim`: an int where the size is known."""
  rng = np.random.default_rng(3)
  x = rng.normal(size=(3, 5, 4, 2)).astype("float32")
  rows = rng.integers(0, 5, size=(3, 6)).astype("int32")
  cases = [(lambda a, i: take_rows(a, i), x, rows, np.take_along_axis(x, rows[:, :, None, None], 1)),
           (lambda a, i: take_rows(a, i), x[:, :, 0, 0], rows,
            np.take_along_axis(x[:, :, 0, 0], rows, 1))]
  for axis in (0, 1, 2, -1):
    picks = rng.integers(0, x.shape[axis], size=(7,)).astype("int32")
    cases.append((lambda a, i, axis=axis: gather(a, i, axis=axis), x, picks, np.take(x, picks, axis)))
  for fn, a, indices, expected in cases:
    np.testing.assert_array_equal(numpy(fn(a, indices)), expected)
    np.testing.assert_array_equal(numpy(compiled(fn)(a, indices)), expected)
  assert dim(ops.convert_to_tensor(x), 2) == 4 and isinstance(dim(ops.convert_to_tensor(x), -1), int)


def test_bad_arguments_are_explained():
  fn, _ = markov_fn([{}])
  with pytest.raises(ValueError, match="vocab_size must be a Python int >= 2"):
    beam_search(fn, {}, 1, 2, 1, 1)
  with pytest.raises(ValueError, match="temperature must be >= 0"):
    sampling_search(fn, {}, 1, 1, temperature=-1.0)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                    reason="unknown batch and length: a tf.function signature (exported models)")
def test_tf_function_with_unknown_batch_and_length():
  tf = importlib.import_module("tensorflow")
  model = TinyRecurrentModel(seed=11)

  @tf.function(input_signature=[tf.TensorSpec([None, 6], tf.float32),
                                tf.TensorSpec([None], tf.int32)])
  def search(h0, lengths):
    batch, max_length, cache = ops.shape(h0)[0], ops.max(lengths), {"layer_0": {"h": h0}}
    beams = beam_search(model.symbols_to_logits, cache, batch, 3, 4, max_length,
                        decode_lengths=lengths)
    greedy = greedy_search(model.symbols_to_logits, cache, batch, max_length,
                           decode_lengths=lengths)
    sampled = sampling_search(model.symbols_to_logits, cache, batch, max_length, seed=1,
                              decode_lengths=lengths)
    return beams, greedy, sampled

  cache, lengths = model.initial_cache(2, seed=12), np.asarray([3, 5], "int32")
  (ids, scores), greedy, sampled = search(cache["layer_0"]["h"], lengths)
  eager_ids, eager_scores = beam_search(model.symbols_to_logits, cache, 2, 3, 4, 5,
                                        decode_lengths=lengths)
  np.testing.assert_array_equal(numpy(ids), numpy(eager_ids))
  np.testing.assert_allclose(numpy(scores), numpy(eager_scores), rtol=1e-6)
  eager_greedy = greedy_search(model.symbols_to_logits, cache, 2, 5, decode_lengths=lengths)
  np.testing.assert_array_equal(numpy(greedy[0]), numpy(eager_greedy[0]))
  assert numpy(sampled[0]).shape == (2, 5) and not numpy(sampled[0])[0, 3:].any()


def test_transformer_large_beam_equals_exhaustive_search():
  # The real model: cached decode_step inside the search against teacher-forced scoring of every
  # sequence. Vocab 5, length <= 4: 1 + 4 + 16 + 64 = 85 sequences end in EOS; a beam of 160
  # keeps all 64 alive prefixes and its 320 candidates cover all 64 * 5 extensions.
  from t2t_lite.hparams import ModelConfig
  from t2t_lite.models import transformer  # the project's own code: an ImportError fails the test
  keras.utils.set_random_seed(0)
  vocab, max_length, alpha = 5, 4, 0.6
  config = ModelConfig(hidden_size=16, filter_size=32, num_heads=2, num_encoder_layers=1,
                       num_decoder_layers=2, layer_prepostprocess_dropout=0.0,
                       attention_dropout=0.0, relu_dropout=0.0)
  model = transformer.Transformer(config, vocab_size=vocab)
  model.build()
  source = np.asarray([[2, 3, 4, 1]], "int32")
  memory, source_mask = model.encode(source)
  cache = model.init_cache(memory, source_mask, max_length)
  ids, scores = beam_search(model.decode_step, cache, 1, 160, vocab, max_length, alpha=alpha,
                            stop_early=False)
  ids, scores = numpy(ids)[0], numpy(scores)[0]

  sequences, targets = every_sequence(max_length)
  expected = assert_every_sequence_found(
      ids, scores, sequences, target_log_probs(teacher_forced_log_probs(model, source, targets),
                                              targets), alpha)
  assert len(expected) == 85
  assert scores[0] == pytest.approx(max(expected.values()), abs=1e-5)


def every_sequence(max_length):
  """Every sequence over PAD, A, B, C that ends in EOS within `max_length` tokens, and the same
  PAD-padded to max_length as one batch of targets int32 [N, max_length] for a teacher-forced
  pass (positions after EOS are causally masked from the ones before, and ignored)."""
  sequences = [prefix + (EOS,) for length in range(max_length)
               for prefix in itertools.product([PAD, A, B, C], repeat=length)]
  targets = np.asarray([seq + (PAD,) * (max_length - len(seq)) for seq in sequences], "int32")
  return sequences, targets


def teacher_forced_log_probs(model, source, targets):
  """float64 log-probabilities [N, T, V] of one teacher-forced pass: `source` [1, S] for each of
  the N `targets`."""
  logits = numpy(model({"inputs": np.repeat(source, len(targets), 0), "targets": targets}))
  return logits - np.logaddexp.reduce(logits.astype("float64"), axis=-1, keepdims=True)


def target_log_probs(log_probs, targets):
  """[N, T]: each target token's log-probability."""
  return np.take_along_axis(log_probs, targets[..., None], -1)[..., 0]


def assert_every_sequence_found(ids, scores, sequences, per_token, alpha):
  """A search's beams (ids [beams, L], scores) hold every one of `sequences` (each the first
  len(sequences) beams' tokens up to EOS) with its GNMT score from the token log-probabilities
  `per_token` [N, T]; returns {sequence: expected score}."""
  expected = {seq: gnmt_score(per_token[i, :len(seq)].sum(), len(seq), alpha)
              for i, seq in enumerate(sequences)}
  found = {until_eos(row): score for row, score in zip(ids[:len(sequences)], scores[:len(sequences)])}
  assert sorted(found) == sorted(expected)
  for seq, score in expected.items():
    np.testing.assert_allclose(found[seq], score, rtol=1e-4, atol=1e-5)
  return expected
