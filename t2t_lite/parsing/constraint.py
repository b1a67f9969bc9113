"""A decoding constraint that makes every output one well-formed tree over the input words.

The search (`t2t_lite.decoding`) carries a small state per hypothesis and, at every step, masks
the logits to the tokens this state allows before it ranks candidates (see
`t2t_lite.decoding.constraints` for the interface). For a linearized tree the state is:

    depth      open brackets                       placed     leaves written so far
    has_child  the innermost open bracket has one   started    the root bracket was opened
    total      leaves the input needs              limit      the sentence's output length limit
    run        brackets opened since the last leaf

and the rules, which hold by construction for every output (greedy, beam or sampled):

- only tree tokens can be written: an opening bracket `(LABEL`, the closing bracket `)`, a
  leaf, or EOS;
- the first token opens the root; nothing follows the root's closing bracket but EOS (one tree);
- a leaf or a bracket goes inside the root; a bracket closes only over at least one child (no
  empty constituent), and the root closes only once every leaf is written;
- exactly one leaf per input word ("xx", "tags"), or exactly the input's pieces in order
  ("words": the leaves are a copy of the source, and no bracket splits a word's pieces);
- EOS only after the root has closed over every leaf;
- a token is allowed only if the rest still fits in the sentence's length limit: after it, the
  leaves still to write, one `)` per open bracket and EOS must fit (so every hypothesis can
  always finish; none is cut off half built);
- at most `max_open_run` brackets open in a row (between two leaves) and at most `max_depth`
  are open at once. Treebank trees stay far below the defaults (the WSJ sample: 6 in a row,
  depth 28), but a model that is unsure of the next word may prefer opening yet another bracket
  to every allowed leaf or `)`, and without a bound it can do so until the length limit.

All of it is `keras.ops` on small integer states and [vocab] lookup tables, so it runs inside the
XLA search loop, a SavedModel's graph and `jax.jit`. Example (ids of a toy vocabulary):

    >>> c = TreeConstraint(vocab_size=7, open_ids=[2, 3], close_ids=[4], leaf_ids=[5],
    ...                    word_start_ids=[5, 6])
    >>> state = c.initial_state(np.array([[6, 6, 1]]), np.array([10]))   # two words, EOS
    >>> np.flatnonzero(ops.convert_to_numpy(c.allowed(state, 0))[0])    # open the root
    array([2, 3])
"""

import numpy as np
from keras import ops

from t2t_lite.token_ids import EOS_ID, PAD_ID

SPACE_PIECE = "\u2581"           # sentencepiece's mark of a preceding space: a word's first piece
MAX_OPEN_RUN = 8
MAX_DEPTH = 48


def _table(vocab_size, ids):
  table = np.zeros((vocab_size,), bool)
  table[np.asarray(list(ids), int)] = True
  return table


class TreeConstraint:
  """Only well-formed linearized trees with one leaf per input word (module docstring).

  Args:
    vocab_size: V.
    open_ids: ids of the opening brackets `(LABEL`.
    close_ids: ids of the closing bracket(s) `)`.
    leaf_ids: ids of the leaf symbols (`XX`, or the part-of-speech tags); None for "words",
      where the leaves are a copy of the source pieces.
    word_start_ids: ids of the pieces that begin a word (they start with the space mark); the
      source's word count is its number of such pieces, and with leaf_ids None a bracket may
      only come before such a piece.
    eos_id: the end-of-sequence id.
    max_open_run: most brackets opened in a row, without a leaf between them.
    max_depth: most brackets open at once.
  """

  def __init__(self, vocab_size, open_ids, close_ids, leaf_ids, word_start_ids, eos_id=EOS_ID,
               max_open_run=MAX_OPEN_RUN, max_depth=MAX_DEPTH):
    self.vocab_size = vocab_size
    self.max_open_run = max_open_run
    self.max_depth = max_depth
    self.copy = leaf_ids is None
    self.is_open = _table(vocab_size, open_ids)
    self.is_close = _table(vocab_size, close_ids)
    self.is_leaf = None if self.copy else _table(vocab_size, leaf_ids)
    self.is_word_start = _table(vocab_size, word_start_ids)
    self.is_word_start[[PAD_ID, eos_id]] = False
    self.eos_id = eos_id
    overlap = self.is_open & self.is_close
    if not self.copy:
      overlap |= (self.is_open | self.is_close) & self.is_leaf
    if overlap.any() or self.is_open[eos_id] or self.is_close[eos_id]:
      raise ValueError("a token id is in two of the open / close / leaf / EOS sets: "
                       f"{np.flatnonzero(overlap).tolist()}")

  @classmethod
  def for_vocab(cls, vocab, linearization, **kwargs):
    """The constraint for a subword vocabulary whose tree tokens are user-defined pieces.

    Args:
      vocab: a `SubwordVocab` built with the tree tokens as `user_defined_symbols`: the opening
        brackets "\u2581(LABEL", the closing "\u2581)", and for "xx" / "tags" the leaf symbols
        (every other user-defined piece).
      linearization: "xx", "tags" or "words" (`t2t_lite.parsing.linearize`).
      **kwargs: `max_open_run`, `max_depth`.
    """
    tree_tokens = vocab.user_defined_pieces()
    if SPACE_PIECE + ")" not in tree_tokens:
      raise ValueError("the vocabulary has no whole piece for ')': build it with the tree tokens "
                       "as user_defined_symbols (see problems/parsing.py)")
    open_ids = [i for p, i in tree_tokens.items() if p.startswith(SPACE_PIECE + "(") and len(p) > 2]
    close_ids = [tree_tokens[SPACE_PIECE + ")"]]
    leaf_ids = None
    if linearization != "words":
      leaf_ids = sorted(set(tree_tokens.values()) - set(open_ids) - set(close_ids))
      if not leaf_ids:
        raise ValueError(f"the vocabulary has no leaf symbols for the {linearization!r} "
                         "linearization")
    pieces = vocab.id_to_piece(range(vocab.vocab_size))
    word_start_ids = [i for i, p in enumerate(pieces) if p.startswith(SPACE_PIECE)]
    return cls(vocab.vocab_size, open_ids, close_ids, leaf_ids, word_start_ids, vocab.eos_id,
               **kwargs)

  # ---- the interface of t2t_lite.decoding.constraints

  def initial_state(self, source_ids, decode_lengths):
    """The state before the first token.

    Args:
      source_ids: int [batch, S], the encoder's input (pieces, EOS, 0-padding).
      decode_lengths: int [batch], each sentence's output length limit, EOS included.
    Returns:
      {name: [batch] or [batch, S] tensor}.
    """
    source_ids = ops.cast(source_ids, "int32")                                   # [b, S]
    tokens = ops.logical_and(ops.not_equal(source_ids, PAD_ID),
                             ops.not_equal(source_ids, self.eos_id))             # [b, S]
    if self.copy:
      total = ops.sum(ops.cast(tokens, "int32"), axis=1)                         # [b]
    else:
      starts = ops.take(ops.convert_to_tensor(self.is_word_start), source_ids)   # [b, S]
      total = ops.sum(ops.cast(ops.logical_and(tokens, starts), "int32"), axis=1)  # [b]
    zeros = ops.zeros_like(total)
    state = {"depth": zeros, "placed": zeros, "total": total, "run": zeros,
             "limit": ops.cast(ops.reshape(decode_lengths, (-1,)), "int32"),
             "has_child": ops.zeros_like(total, "bool"),
             "started": ops.zeros_like(total, "bool")}
    if self.copy:
      state["source"] = source_ids
    return state

  def _next_piece(self, state):
    """Copy mode: the source piece to write next (PAD once all are written), [batch]."""
    position = ops.minimum(state["placed"], ops.shape(state["source"])[1] - 1)
    piece = ops.take_along_axis(state["source"], position[:, None], axis=1)[:, 0]
    return ops.where(state["placed"] < state["total"], piece, PAD_ID)

  def allowed(self, state, step):
    """bool [batch, vocab]: the tokens this state may write at `step` (0-based)."""
    depth, placed, total = state["depth"], state["placed"], state["total"]
    left = total - placed                                                        # [b]
    after = state["limit"] - ops.cast(step, "int32") - 1                         # [b] tokens left
    root_closed = ops.logical_and(state["started"], depth == 0)                  # [b]
    if self.copy:
      piece = self._next_piece(state)                                            # [b]
      mid_word = ops.logical_and(
          ops.logical_and(placed > 0, left > 0),
          ops.logical_not(ops.take(ops.convert_to_tensor(self.is_word_start), piece)))
    else:
      mid_word = ops.zeros_like(root_closed)
    between_words = ops.logical_not(mid_word)
    # After the token: leaves still to write, one ")" per open bracket, and EOS must fit.
    open_ok = (ops.logical_not(root_closed) & between_words & (left >= 1) &
               (left + depth + 2 <= after) & (state["run"] < self.max_open_run) &
               (depth < self.max_depth))
    close_ok = ((depth >= 1) & state["has_child"] & between_words &
                ((depth > 1) | (left == 0)) & (left + depth <= after))
    leaf_ok = (depth >= 1) & (left >= 1) & (left + depth <= after)
    eos_ok = state["started"] & (depth == 0) & (left == 0)
    table = lambda t: ops.convert_to_tensor(t)[None, :]                          # [1, V]
    if self.copy:
      leaves = ops.equal(ops.arange(self.vocab_size, dtype="int32")[None, :], piece[:, None])
    else:
      leaves = table(self.is_leaf)
    eos = ops.equal(ops.arange(self.vocab_size, dtype="int32"), self.eos_id)[None, :]
    mask = ((open_ok[:, None] & table(self.is_open)) | (close_ok[:, None] & table(self.is_close))
            | (leaf_ok[:, None] & leaves) | (eos_ok[:, None] & eos))             # [b, V]
    # A state that allows nothing cannot arise from the rules above (tests enumerate them), but
    # a sentence whose limit is too short for any tree, or a padding row, ends at once.
    return mask | (ops.logical_not(ops.any(mask, axis=1))[:, None] & eos)

  def update(self, state, tokens, step):
    """The state after writing `tokens` (int [batch]) at `step`."""
    del step
    tokens = ops.cast(tokens, "int32")
    if self.copy:
      # A leaf is the next source piece (it wins over a bracket of the same id).
      is_leaf = ops.equal(tokens, self._next_piece(state)) & (state["placed"] < state["total"])
    else:
      is_leaf = ops.take(ops.convert_to_tensor(self.is_leaf), tokens)
    not_leaf = ops.logical_not(is_leaf)
    is_open = ops.take(ops.convert_to_tensor(self.is_open), tokens) & not_leaf
    is_close = ops.take(ops.convert_to_tensor(self.is_close), tokens) & not_leaf
    as_int = lambda t: ops.cast(t, "int32")
    new = dict(state)
    new["depth"] = state["depth"] + as_int(is_open) - as_int(is_close)
    new["placed"] = state["placed"] + as_int(is_leaf)
    new["run"] = ops.where(is_leaf, 0, state["run"] + as_int(is_open))
    new["has_child"] = ops.where(is_open, False, state["has_child"] | is_close | is_leaf)
    new["started"] = state["started"] | is_open
    return new
