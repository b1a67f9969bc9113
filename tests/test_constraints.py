"""Constrained decoding: the tree constraint against brute-force enumeration, and constraints
(tree, forced prefix) inside greedy decoding, sampling and beam search.

Backend-agnostic (keras.ops + numpy): run with KERAS_BACKEND=tensorflow and KERAS_BACKEND=jax.
"""

import numpy as np
import pytest
from keras import ops

from t2t_lite.decoding.beam_search import beam_search
from t2t_lite.decoding.constraints import ForcedPrefix
from t2t_lite.decoding.sampling import greedy_search, sampling_search
from t2t_lite.parsing.constraint import TreeConstraint

pytestmark = pytest.mark.backend_independent

PAD, EOS = 0, 1
OPEN_A, OPEN_B, CLOSE, XX, JUNK = 2, 3, 4, 5, 6
WORD, WORD2, CONT = 7, 8, 9            # word-start pieces and a continuation piece
VOCAB = 10
OPENS, CLOSES = (OPEN_A, OPEN_B), (CLOSE,)


def symbol_constraint():
  return TreeConstraint(VOCAB, OPENS, CLOSES, leaf_ids=[XX], word_start_ids=[WORD, WORD2])


def copy_constraint():
  return TreeConstraint(VOCAB, OPENS, CLOSES, leaf_ids=None, word_start_ids=[WORD, WORD2])


def numpy_tree(state):
  return {k: np.asarray(ops.convert_to_numpy(v)) for k, v in state.items()}


# ---------------------------------------------------------------- an independent tree checker


def is_tree(tokens, leaves, max_open_run=99, max_depth=99):
  """True if `tokens` is one bracketed tree (OPEN child+ CLOSE, a child a tree or a leaf) whose
  leaves, left to right, are `leaves`, with at most `max_open_run` brackets opened between two
  leaves and `max_depth` open at once. Written without the constraint's state machine."""
  position = 0
  found = []
  depth = run = 0
  for token in tokens:
    depth += (token in OPENS) - (token in CLOSES)
    run = run + 1 if token in OPENS else (0 if token not in CLOSES else run)
    if depth > max_depth or run > max_open_run:
      return False

  def tree():
    nonlocal position
    if position >= len(tokens) or tokens[position] not in OPENS:
      return False
    position += 1
    children = 0
    while position < len(tokens) and tokens[position] not in CLOSES:
      if tokens[position] in OPENS:
        if not tree():
          return False
      elif tokens[position] in (XX, WORD, WORD2, CONT):
        found.append(tokens[position])
        position += 1
      else:
        return False
      children += 1
    if position >= len(tokens) or children == 0:
      return False
    position += 1
    return True

  return tree() and position == len(tokens) and found == list(leaves)


def sequences_with_leaves(alphabet, max_length, leaves):
  """The sequences over `alphabet` of 1 to `max_length` tokens that pass two checks every tree of
  `is_tree(seq, leaves)` passes: their other tokens than brackets are `leaves` in order, and their
  brackets, opened and closed left to right, close the first one last (depth above 0 inside,
  0 at the end). Filtered with `is_tree`, as the tests still do, they give the same trees as all
  the len(alphabet) ** length sequences of each length (millions at 6 tokens and length 8)."""
  leaves, found = tuple(leaves), []

  def extend(prefix, placed, depth):
    if depth == 0 and prefix:                    # the first bracket closed: nothing may follow
      if placed == len(leaves):
        found.append(prefix)
      return
    if len(prefix) == max_length:
      return
    for token in alphabet:
      if token in OPENS:
        extend(prefix + (token,), placed, depth + 1)
      elif token in CLOSES:
        if depth > 0:
          extend(prefix + (token,), placed, depth - 1)
      elif placed < len(leaves) and token == leaves[placed]:
        extend(prefix + (token,), placed + 1, depth)

  extend((), 0, 0)
  return found


def words_unsplit(tokens):
  """No bracket between a piece and the continuation piece after it."""
  return all(not (b == CONT and a not in (WORD, WORD2, CONT)) for a, b in zip(tokens, tokens[1:]))


# ---------------------------------------------------------------- brute force


def reachable_outputs(constraint, source, limit, is_complete):
  """Every complete output (tokens before EOS) the constraint allows within `limit` tokens
  (EOS included), by breadth-first search over allowed tokens; the frontier is one batch.

  `is_complete(prefix)`, the test's own checker, must hold wherever EOS is allowed: a dead end
  (a state the rules leave with no token, which the constraint ends with EOS) fails here. No
  prefix may still be open after `limit` steps: every hypothesis finishes within its limit."""
  state = numpy_tree(constraint.initial_state(np.array([source]), np.array([limit])))
  prefixes = [()]
  complete = set()
  for step in range(limit):
    if not prefixes:
      break
    mask = np.asarray(ops.convert_to_numpy(constraint.allowed(state, step)))
    rows, tokens = np.nonzero(mask)
    assert set(rows) == set(range(len(prefixes))), "a reachable state allows no token"
    keep = tokens != EOS
    for row in rows[~keep]:
      assert is_complete(prefixes[row]), f"EOS allowed after {prefixes[row]}: a dead end"
      complete.add(prefixes[row])
    rows, tokens = rows[keep], tokens[keep]
    state = numpy_tree(constraint.update({k: v[rows] for k, v in state.items()},
                                         np.asarray(tokens, "int32"), step))
    prefixes = [prefixes[r] + (int(t),) for r, t in zip(rows, tokens)]
  assert not prefixes, f"{len(prefixes)} prefixes still open at the limit, e.g. {prefixes[0]}"
  return complete


@pytest.mark.parametrize("words, limit", [(1, 8), (2, 8), (3, 9)])
def test_tree_constraint_allows_exactly_the_trees_with_one_leaf_per_word(words, limit):
  """Every output it allows is a tree with `words` XX leaves, and every such tree that fits in
  the limit (EOS included) is reachable: the allowed set equals brute-force enumeration."""
  source = [WORD] * words + [EOS, PAD]
  allowed = reachable_outputs(symbol_constraint(), source, limit,
                              lambda seq: is_tree(seq, [XX] * words))
  alphabet = OPENS + CLOSES + (XX,)
  every_tree = {seq for seq in sequences_with_leaves(alphabet, limit - 1, [XX] * words)
                if is_tree(seq, [XX] * words)}
  assert allowed == every_tree
  assert len(every_tree) > 5 * words                 # unary chains, both labels, nesting


@pytest.mark.parametrize("max_open_run, max_depth", [(1, 9), (2, 9), (9, 2), (2, 3)])
def test_tree_constraint_bounds_brackets_in_a_row_and_depth(max_open_run, max_depth):
  constraint = TreeConstraint(VOCAB, OPENS, CLOSES, leaf_ids=[XX], word_start_ids=[WORD],
                              max_open_run=max_open_run, max_depth=max_depth)
  allowed = reachable_outputs(constraint, [WORD, WORD, EOS], 9,
                              lambda seq: is_tree(seq, [XX] * 2, max_open_run, max_depth))
  every_tree = {seq for seq in sequences_with_leaves(OPENS + CLOSES + (XX,), 8, [XX] * 2)
                if is_tree(seq, [XX] * 2, max_open_run, max_depth)}
  assert allowed == every_tree and every_tree


@pytest.mark.parametrize("source, limit", [([WORD, CONT, WORD2], 9), ([WORD, WORD2, CONT, CONT], 9),
                                           ([WORD], 7)])
def test_copy_constraint_allows_exactly_the_trees_over_the_source_pieces(source, limit):
  """Word leaves: the leaves are the source pieces in order, a word's pieces never split by a
  bracket; every such tree within the limit is reachable."""
  allowed = reachable_outputs(copy_constraint(), source + [EOS], limit,
                              lambda seq: is_tree(seq, source) and words_unsplit(seq))
  alphabet = OPENS + CLOSES + tuple(sorted(set(source)))
  every_tree = {seq for seq in sequences_with_leaves(alphabet, limit - 1, source)
                if is_tree(seq, source) and words_unsplit(seq)}
  assert allowed == every_tree and every_tree


def test_tree_constraint_state_counts_words_and_forbids_empty_and_second_trees():
  constraint = symbol_constraint()
  state = constraint.initial_state(np.array([[WORD, CONT, WORD2, EOS, PAD], [WORD, EOS, 0, 0, 0]]),
                                   np.array([20, 20]))
  assert numpy_tree(state)["total"].tolist() == [2, 1]          # continuation pieces not counted
  allowed = lambda st, step: np.flatnonzero(numpy_tree({"m": constraint.allowed(st, step)})["m"][0])
  state = {k: v[1:] for k, v in numpy_tree(state).items()}
  assert allowed(state, 0).tolist() == list(OPENS)                # first the root
  state = numpy_tree(constraint.update(state, np.array([OPEN_A]), 0))
  assert allowed(state, 1).tolist() == [*OPENS, XX]               # no ")" over nothing
  state = numpy_tree(constraint.update(state, np.array([XX]), 1))
  assert allowed(state, 2).tolist() == [CLOSE]                    # the only word is placed
  state = numpy_tree(constraint.update(state, np.array([CLOSE]), 2))
  assert allowed(state, 3).tolist() == [EOS]                      # one tree, then the end


def test_tree_constraint_leaves_room_to_finish_within_the_limit():
  """With 2 words and a limit of 6 tokens, (A XX XX ) EOS is the only shape: no extra bracket."""
  two_leaves = lambda seq: is_tree(seq, [XX] * 2)
  outputs = reachable_outputs(symbol_constraint(), [WORD, WORD2, EOS], 6, two_leaves)
  assert all(len(seq) <= 5 for seq in outputs)
  assert (OPEN_A, XX, XX, CLOSE) in outputs and (OPEN_A, OPEN_B, XX, CLOSE, XX, CLOSE) not in outputs
  # A limit too short for any tree: EOS at once rather than a dead end.
  assert reachable_outputs(symbol_constraint(), [WORD, WORD2, EOS], 4, lambda seq: seq == ()) == {()}


def test_tree_constraint_rejects_overlapping_token_sets():
  with pytest.raises(ValueError, match="two of the open / close / leaf"):
    TreeConstraint(VOCAB, OPENS, [OPEN_A], leaf_ids=[XX], word_start_ids=[WORD])


# ---------------------------------------------------------------- inside the searches


def random_model(seed, vocab=VOCAB):
  """A Markov 'model' with random logits per (last token, step): any token is likely somewhere."""
  table = ops.convert_to_tensor(
      np.random.default_rng(seed).normal(size=(40, vocab, vocab)).astype("float32") * 3)

  def fn(ids, step, cache):
    return ops.take(ops.take(table, step, axis=0), ids, axis=0), cache

  return fn, np.asarray(ops.convert_to_numpy(table))


def until_eos(row):
  row = [int(t) for t in row]
  return tuple(row[:row.index(EOS)]) if EOS in row else None


SOURCES = np.array([[WORD, WORD2, EOS, PAD, PAD], [WORD, CONT, WORD2, WORD, EOS], [WORD, EOS, 0, 0, 0]])


@pytest.mark.parametrize("search", ["greedy", "sampling", "beam"])
@pytest.mark.parametrize("copy", [False, True])
def test_every_constrained_output_is_a_tree_over_the_input(search, copy):
  constraint = copy_constraint() if copy else symbol_constraint()
  limits = np.array([12, 16, 9])
  state = constraint.initial_state(SOURCES, limits)
  for seed in range(3):
    fn, _ = random_model(seed)
    kwargs = dict(decode_lengths=limits, constraint=constraint, constraint_state=state)
    if search == "beam":
      ids, scores = beam_search(fn, {}, 3, 4, VOCAB, 16, alpha=0.6, **kwargs)
      outputs = np.asarray(ops.convert_to_numpy(ids))               # [3, 4, 16]
      filled = np.isfinite(np.asarray(ops.convert_to_numpy(scores)))  # unfilled slots: -inf
      assert filled[:, 0].all() and not outputs[~filled].any()
      outputs = [beams[keep] for beams, keep in zip(outputs, filled)]
    elif search == "greedy":
      outputs = np.asarray(ops.convert_to_numpy(greedy_search(fn, {}, 3, 16, **kwargs)[0]))[:, None]
    else:
      outputs = np.asarray(ops.convert_to_numpy(
          sampling_search(fn, {}, 3, 16, temperature=1.0, seed=seed, **kwargs)[0]))[:, None]
    for sentence, beams in enumerate(outputs):
      for row in beams:
        tokens = until_eos(row)
        assert tokens is not None and len(tokens) < limits[sentence], row
        assert is_tree(tokens, expected_leaves(sentence, copy)) and words_unsplit(tokens), row
  # Unconstrained, the same models write no tree over any sentence's own leaves (2, 3 and 1
  # words): the checks above can fail.
  for seed in range(3):
    fn, _ = random_model(seed)
    free = np.asarray(ops.convert_to_numpy(greedy_search(fn, {}, 3, 16, decode_lengths=limits)[0]))
    assert not any(until_eos(row) is not None and is_tree(until_eos(row), expected_leaves(s, copy))
                   for s, row in enumerate(free))


def expected_leaves(sentence, copy):
  """The leaves of a tree over SOURCES[sentence]: its pieces (copy) or one XX per word."""
  source = [int(t) for t in SOURCES[sentence] if t not in (PAD, EOS)]
  return source if copy else [XX] * sum(t in (WORD, WORD2) for t in source)


def teacher_forced_log_prob(table, tokens):
  """Sum of log_softmax(table[step, last]) at each written token (last starts at 0)."""
  total, last = 0.0, 0
  for step, token in enumerate(tokens):
    logits = table[step, last].astype("float64")
    total += logits[token] - np.log(np.sum(np.exp(logits - logits.max()))) - logits.max()
    last = token
  return total


@pytest.mark.parametrize("search", ["greedy", "sampling", "beam"])
def test_forced_prefix_outputs_start_with_it_and_score_the_models_log_probs(search):
  """A constraint from Python: the outputs begin with each sentence's prefix, and their scores
  are the model's own log-probabilities of the whole output (not renormalised by the mask)."""
  fn, table = random_model(7)
  prefixes = np.array([[5, 6, 7], [8, 0, 0], [0, 0, 0]])          # 0-padded; the last is empty
  constraint = ForcedPrefix(VOCAB)
  state = constraint.initial_state(prefixes)
  kwargs = dict(constraint=constraint, constraint_state=state)
  if search == "beam":
    ids, scores = beam_search(fn, {}, 3, 3, VOCAB, 12, alpha=0.0, **kwargs)
  elif search == "greedy":
    ids, scores = greedy_search(fn, {}, 3, 12, **kwargs)
    ids, scores = ids[:, None], scores[:, None]
  else:
    ids, scores = sampling_search(fn, {}, 3, 12, temperature=1.0, seed=3, **kwargs)
    ids, scores = ids[:, None], scores[:, None]
  ids, scores = np.asarray(ops.convert_to_numpy(ids)), np.asarray(ops.convert_to_numpy(scores))
  for sentence, prefix in enumerate(prefixes):
    prefix = [int(t) for t in prefix if t]
    for row, score in zip(ids[sentence], scores[sentence]):
      row = [int(t) for t in row]
      assert row[:len(prefix)] == prefix
      written = row[:row.index(EOS) + 1] if EOS in row else row
      np.testing.assert_allclose(score, teacher_forced_log_prob(table, written), rtol=1e-4)
  # Without the constraint the model's own first choices differ from the prefix.
  free = np.asarray(ops.convert_to_numpy(greedy_search(fn, {}, 3, 12)[0]))
  assert free[0, :3].tolist() != [5, 6, 7]


def per_row_model(table):
  """`random_model`'s logits for a step per row (a refill search's slots): table[step[r], ids[r]]."""
  flat = ops.reshape(ops.convert_to_tensor(table), (-1, table.shape[-1]))      # [40 * V, V]

  def fn(ids, steps, cache, inputs):
    del inputs
    return ops.take(flat, steps * table.shape[1] + ids, axis=0), cache         # [rows, V]
  return fn


@pytest.mark.parametrize("beam", [1, 3], ids=["greedy", "beam3"])
def test_forced_prefix_with_a_step_per_row_gives_the_batch_searchs_results(beam):
  """ForcedPrefix's per-row branch (`allowed` at a step [batch], only a refill search reaches it):
  four sentences through two slots, so a refilled slot starts its prefix at step 0 while the
  other slot is steps ahead; each sentence's outputs are the batch search's for it (scalar step),
  and begin with its own prefix. (A per-row branch that forced the first prefix token at every
  step, or the token of another row's step, fails both.)"""
  from t2t_lite.decoding.refill_search import refill_search
  fn, table = random_model(7)
  prefixes = np.array([[5, 6, 7], [8, 0, 0], [6, 5, 0], [0, 0, 0]])     # 0-padded; the last empty
  limits = np.array([10, 4, 7, 6], "int32")
  constraint = ForcedPrefix(VOCAB)
  ids, scores = refill_search(per_row_model(table), {}, {}, 2, beam, VOCAB, 10, limits,
                              alpha=0.6, constraint=constraint,
                              constraint_state=constraint.initial_state(prefixes))
  ids, scores = np.asarray(ops.convert_to_numpy(ids)), np.asarray(ops.convert_to_numpy(scores))
  for sentence, prefix in enumerate(prefixes):
    state = constraint.initial_state(prefixes[sentence:sentence + 1])
    want_ids, want_scores = beam_search(fn, {}, 1, beam, VOCAB, 10, alpha=0.6,
                                        decode_lengths=limits[sentence:sentence + 1],
                                        constraint=constraint, constraint_state=state)
    np.testing.assert_array_equal(ids[sentence], np.asarray(ops.convert_to_numpy(want_ids))[0])
    np.testing.assert_allclose(scores[sentence], np.asarray(ops.convert_to_numpy(want_scores))[0],
                               rtol=1e-5, atol=1e-5)
    prefix = [int(t) for t in prefix if t]
    filled = ids[sentence][np.isfinite(scores[sentence])]     # a constrained beam's empty slots
    assert len(filled) and all(row[:len(prefix)].tolist() == prefix for row in filled), ids[sentence]


def test_masked_candidates_do_not_count_as_ended_for_the_finished_stop():
  """`stop_when_finished` counts the hypotheses that ended among a step's beam best candidates.
  A forced prefix leaves one allowed token per hypothesis, so fewer than beam candidates are
  real and the others are masked ones at -inf, EOS among them (top_k takes tied -inf entries in
  index order): counted as ended, they stopped the search right after the prefix with nothing
  finished. Every sentence's best must instead be a finished output (EOS after its prefix),
  scored with the length penalty, against the model's own log-probabilities."""
  fn, table = random_model(7)
  prefixes = np.array([[5, 6, 7], [8, 9, 6], [6, 5, 8]])
  constraint = ForcedPrefix(VOCAB)
  ids, scores = beam_search(fn, {}, 3, 3, VOCAB, 12, alpha=0.6, constraint=constraint,
                            constraint_state=constraint.initial_state(prefixes),
                            stop_when_finished=True)
  ids, scores = np.asarray(ops.convert_to_numpy(ids)), np.asarray(ops.convert_to_numpy(scores))
  for prefix, row, score in zip(prefixes, ids[:, 0], scores[:, 0]):
    row = [int(t) for t in row]
    assert row[:3] == prefix.tolist() and EOS in row[3:], row
    written = row[:row.index(EOS) + 1]
    np.testing.assert_allclose(
        score, teacher_forced_log_prob(table, written) / ((5.0 + len(written)) / 6.0) ** 0.6,
        rtol=1e-4)
