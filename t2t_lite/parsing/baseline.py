"""A trivial parser to measure against: right-branching trees over the gold tags.

    (S w1 (L w2 (L w3 ... (L w_n-1 w_n))) .)

The root is `S` over the whole sentence; a sentence-final punctuation word (gold tag `.`) hangs
from the root, as in the treebank; every other word starts a constituent reaching the last
word before that punctuation, down to one of two words. Two labelings:

- `"np"`: every non-root constituent is `NP` (the most frequent label);
- `"pos"`: a constituent's label follows the tag of its first word: verbs, modals and `to`
  (VB*, MD, TO) start a `VP`, prepositions (IN) a `PP`, anything else an `NP`.

It uses no model and no training data; it needs the gold tags (a parser gets only words), so it
is a floor, not a competitor. `scripts/parsing_baseline.py` prints its F1 on a split.
"""

from t2t_lite.parsing.trees import Tree

LABELINGS = ("np", "pos")


def _label(tag, labeling):
  if labeling == "pos":
    if tag.startswith("VB") or tag in ("MD", "TO"):
      return "VP"
    if tag == "IN":
      return "PP"
  return "NP"


def right_branching(tagged_words, labeling="pos", root_label="S"):
  """The right-branching tree of [(tag, word), ...] (see the module docstring)."""
  if labeling not in LABELINGS:
    raise ValueError(f"unknown labeling {labeling!r}; use one of {LABELINGS}")
  leaves = [Tree(tag, [word]) for tag, word in tagged_words]
  final = [leaves.pop()] if len(leaves) > 1 and tagged_words[-1][0] == "." else []
  node = None
  for i in range(len(leaves) - 1, -1, -1):
    if node is None:
      node = leaves[i]
    elif i == 0:
      node = Tree(root_label, [leaves[0], node] + final)
    else:
      node = Tree(_label(tagged_words[i][0], labeling), [leaves[i], node])
  if node is None or node.is_preterminal:
    node = Tree(root_label, ([node] if node else []) + final)
  return node
