"""A search loop whose batch shrinks as its sentences end (decode hparam `shrink_batch`).

A batch search runs every step over all its rows until its longest output ends, so the steps
after most sentences have ended cost as much as the first ones (`scripts/batching_cost.py` counts
them against a batch that drops each sentence when it ends, CTranslate2's way; the figures are in
docs/performance.md). Dropping sentences one by one changes the batch's
shape every step, which a compiled program cannot do; here the batch runs at a few static sizes
instead, `batch_sizes` (the batch, then halved): while more sentences are running than the next
size holds, the loop runs at the current size; then the running sentences are moved to the
front (the ended ones behind them, their state final) and the loop goes on over the first rows
only, at the smallest size that holds them. Every size is its own loop, compiled once, with its
state sliced from (and written back into) the full batch's buffers, so a search compiles one
step per size and cache phase (`sampling.run_phases`), and moves each sentence's state at most
once per size.

A sentence's search depends on its own rows only (its state is frozen once it is done), so the
results are those of the search over the whole batch; the rows are put back in their order at
the end.
"""

import keras
from keras import ops

from t2t_lite.decoding.gathers import gather


def batch_sizes(batch_size: int, smallest: int) -> tuple[int, ...]:
  """The sizes a shrinking search over `batch_size` sentences runs at: the batch, then halved
  (rounded up) while the half holds at least `smallest` sentences. (32, 4) -> (32, 16, 8, 4);
  (48, 8) -> (48, 24, 12); (8, 8) -> (8,)."""
  if not isinstance(batch_size, int) or batch_size < 1 or smallest < 1:
    raise ValueError(f"batch_sizes needs a Python int batch_size >= 1 and smallest >= 1, got "
                     f"{batch_size!r} and {smallest!r}")
  sizes = [batch_size]
  while sizes[-1] > 1 and (sizes[-1] + 1) // 2 >= smallest:
    sizes.append((sizes[-1] + 1) // 2)
  return tuple(sizes)


def _per_sentence(t, batch):
  """How many rows each of `batch` sentences has in t ([batch * k, ...]); 0 for a scalar."""
  if len(t.shape) == 0:
    return 0
  if t.shape[0] is None or t.shape[0] % batch:
    raise ValueError(f"a shrinking search needs every state tensor to have batch * k rows on "
                     f"axis 0 (batch {batch}), got shape {tuple(t.shape)}")
  return t.shape[0] // batch


def first_sentences(tree, batch, count):
  """The rows of the first `count` of `batch` sentences of every tensor of `tree` (scalars as
  they are)."""
  def cut(t):
    k = _per_sentence(t, batch)
    return t if k == 0 else t[:count * k]
  return keras.tree.map_structure(cut, tree)


def take_sentences(tree, order, batch):
  """The rows of sentences `order` (int32 [n]) of every tensor of `tree` ([batch * k, ...]:
  each sentence's k rows stay together; scalars as they are)."""
  def take(t):
    k = _per_sentence(t, batch)
    if k == 0:
      return t
    if k == 1:
      return gather(t, order)
    rows = order[:, None] * k + ops.arange(k, dtype="int32")[None, :]          # [n, k]
    return gather(t, ops.reshape(rows, (-1,)))                                 # [n * k, ...]
  return keras.tree.map_structure(take, tree)


def _written(full, part):
  """`full` with its first rows replaced by `part`'s (scalars: part's)."""
  return keras.tree.map_structure(
      lambda f, p: p if len(f.shape) == 0 else ops.slice_update(f, [0] * len(f.shape), p),
      full, part)


def _running(state):
  return ops.sum(ops.cast(ops.logical_not(state.done), "int32"))


def run_shrinking(cond, body, state, extras, sizes, cache_lengths=None, extend_cache=None):
  """Runs `body` while `cond` holds, over fewer rows as sentences end; returns the final state.

  Args:
    cond: `state -> scalar bool`, the search goes on (e.g. steps left and a sentence not done).
    body: `(state, extras, batch) -> state`, one step over `batch` sentences: the first rows of
      the state and of `extras`.
    state: a NamedTuple with `step` (a scalar), `done` (bool [batch]) and `cache`; every other
      tensor (the cache's too) has batch * k rows, k per sentence (scalars are shared).
    extras: a nested structure of per-sentence tensors the body reads and never changes (e.g.
      the encoder's keys and values, each sentence's length limit); moved with the rows.
    sizes: the batch sizes (`batch_sizes`): decreasing Python ints, the first the batch.
    cache_lengths, extend_cache: the cache grown in phases, as `sampling.run_phases`.

  Returns:
    The state after the last step, its rows in the order they came, its cache `{}`.
  """
  sizes = tuple(sizes)
  if not sizes or list(sizes) != sorted(set(sizes), reverse=True) or sizes[-1] < 1:
    raise ValueError(f"sizes must be decreasing Python ints >= 1, got {sizes!r}")
  batch = sizes[0]
  _per_sentence(state.done, batch)
  lengths = tuple(cache_lengths) if cache_lengths else (None,)
  size_array = ops.convert_to_tensor(sizes, "int32")

  def goes_on(state, length):
    go = cond(state)
    return go if length is None else go & (state.step < length)

  def at_size(index, length):
    """Runs the loop over the first sizes[index] sentences until fewer than the next size are
    running (or the phase or the search ends), then moves the running ones to the front."""
    size = sizes[index]
    smaller = sizes[index + 1] if index + 1 < len(sizes) else None

    def run(state, extras, rows):
      part = first_sentences((state, extras, rows), batch, size)
      part_state, part_extras, part_rows = part

      def go(s):
        more = goes_on(s, length)
        return more if smaller is None else more & (_running(s) > smaller)

      (part_state,) = ops.while_loop(go, lambda s: (body(s, part_extras, size),), (part_state,))
      if smaller is None:
        return _written(state, part_state), extras, rows
      # The running sentences first, in their order, then the ended ones.
      order = ops.argsort(ops.cast(part_state.done, "int32") * size
                          + ops.arange(size, dtype="int32"))
      moved = take_sentences((part_state, part_extras, part_rows), order, size)
      return _written((state, extras, rows), moved)
    return run

  def phase(state, extras, rows, index, length):
    def step(state, extras, rows, index):
      state, extras, rows = ops.switch(
          index, [at_size(i, length) for i in range(len(sizes))], state, extras, rows)
      fitting = ops.sum(ops.cast(size_array >= _running(state), "int32")) - 1  # smallest size that holds them
      return state, extras, rows, ops.maximum(index, fitting)
    return ops.while_loop(lambda s, e, r, i: goes_on(s, length), step, (state, extras, rows, index))

  def finish(state, rows):
    return take_sentences(state._replace(cache={}), ops.argsort(rows), batch)

  def from_phase(state, extras, rows, index, number):
    state, extras, rows, index = phase(state, extras, rows, index, lengths[number])
    if number + 1 == len(lengths):
      return finish(state, rows)
    grown = lambda: from_phase(  # noqa: E731
        state._replace(cache=extend_cache(state.cache, lengths[number + 1])), extras, rows, index,
        number + 1)
    return ops.cond(cond(state), grown, lambda: finish(state, rows))

  return from_phase(state, extras, ops.arange(batch, dtype="int32"),
                    ops.convert_to_tensor(0, "int32"), 0)
