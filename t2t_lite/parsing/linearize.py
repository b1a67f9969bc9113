"""Trees as token sequences (the model's targets) and decoded sequences back into trees.

The format (Vinyals & Kaiser et al. 2014, "Grammar as a foreign language", with part-of-speech
tags collapsed): an opening bracket glued to its label, one `XX` per word, a plain closing
bracket, tokens separated by single spaces. The words themselves are not in the target; they
are the input.

    (S (NP (NNP Vinken)) (VP (VBZ is) (NP (NN chairman))) (. .))
    -> inputs  "Vinken is chairman ."
    -> targets "(S (NP XX ) (VP XX (NP XX ) ) XX )"

Plain `)` rather than Vinyals' labelled `)NP`: the label of a closing bracket is implied by the
bracket it closes, and fewer symbols make shorter, easier targets. `tree_from_linearized`
accepts `)NP` too (the label is ignored).

Decoded sequences need not be well formed. `tree_from_linearized` always returns one tree whose
leaves are exactly the input words, each under the placeholder tag `XX`, by these rules (each
application is reported as a repair):

1. a token `(LABEL` opens a constituent (a bare `(` opens one labelled `X`); a token starting
   with `)` closes the innermost open one, and is dropped when none is open ("unmatched");
   any other token is a leaf;
2. constituents still open at the end are closed there ("unclosed");
3. several top-level items (a constituent closed too early, or leaves outside any bracket)
   all become children of the first top-level constituent, in order ("top-level"); a sequence
   with no constituent at all becomes `(S leaves...)` ("no constituent");
4. more leaves than input words: the last extra leaves are dropped ("extra leaves"); fewer:
   leaves are appended as the last children of the root ("missing leaves") - where a missing
   sentence-final period belongs;
5. constituents left without leaves are removed ("empty constituent");
6. leaf i gets input word i.
"""

import dataclasses

from t2t_lite.parsing.trees import Tree

POS_PLACEHOLDER = "XX"
DEFAULT_ROOT = "S"
UNKNOWN_LABEL = "X"


def linearize(tree, pos_placeholder=POS_PLACEHOLDER):
  """`(S (NP (NNP Vinken)) (. .))` -> `"(S (NP XX ) XX )"` (the words are dropped)."""
  tokens = []

  def visit(node):
    if node.is_preterminal:
      tokens.append(pos_placeholder)
      return
    tokens.append("(" + node.label)
    for child in node.children:
      visit(child)
    tokens.append(")")

  visit(tree)
  return " ".join(tokens)


def text_pair(tree):
  """(inputs, targets) of a cleaned tree: the words space-joined, the linearized tree."""
  return " ".join(tree.leaves()), linearize(tree)


@dataclasses.dataclass
class Delinearized:
  """What `tree_from_linearized` returns: the tree and the repairs applied (empty if none)."""
  tree: Tree
  repairs: tuple = ()

  @property
  def repaired(self):
    return bool(self.repairs)


class _Node:
  __slots__ = ("label", "children")

  def __init__(self, label):
    self.label = label
    self.children = []   # _Node, or None for a leaf


def tree_from_linearized(text, words, pos_placeholder=POS_PLACEHOLDER):
  """A linearized (decoded) tree with the input words restored at its leaves.

  Args:
    text: e.g. "(S (NP XX ) (VP XX ) XX )"; malformed sequences are repaired (module docstring).
    words: the input words (a list, or the input line).
    pos_placeholder: the tag given to every leaf.

  Returns:
    `Delinearized(tree, repairs)`; `tree.leaves() == words`.

  Example:
      >>> result = tree_from_linearized("(S (NP XX ) ) XX XX )", "Vinken is chairman .")
      >>> str(result.tree), result.repairs
      ('(S (NP (XX Vinken)) (XX is) (XX chairman) (XX .))', ('unmatched', 'top-level', 'missing leaves'))
  """
  if isinstance(words, str):
    words = words.split()
  repairs = []
  top = _Node(None)
  stack = [top]
  for token in text.split():
    if token.startswith("("):
      node = _Node(token[1:] or UNKNOWN_LABEL)
      if not token[1:]:
        repairs.append("unlabelled bracket")
      stack[-1].children.append(node)
      stack.append(node)
    elif token.startswith(")"):
      if len(stack) > 1:
        stack.pop()
      elif "unmatched" not in repairs:
        repairs.append("unmatched")
    else:
      stack[-1].children.append(None)
  if len(stack) > 1:
    repairs.append("unclosed")

  constituents = [c for c in top.children if c is not None]
  if not constituents:
    root = _Node(DEFAULT_ROOT)
    root.children = top.children
    repairs.append("no constituent")
  elif len(top.children) > 1:
    root = constituents[0]
    first = top.children.index(root)
    root.children = top.children[:first] + root.children + top.children[first + 1:]
    repairs.append("top-level")
  else:
    root = constituents[0]

  num_leaves = _count_leaves(root)
  if num_leaves > len(words):
    _drop_last_leaves(root, num_leaves - len(words))
    repairs.append("extra leaves")
  elif num_leaves < len(words):
    root.children.extend([None] * (len(words) - num_leaves))
    repairs.append("missing leaves")

  leaves = iter(words)
  tree = _build(root, leaves, pos_placeholder)
  if tree is None:                 # no words at all
    tree = Tree(root.label, [])
  if _has_empty(root):
    repairs.append("empty constituent")
  return Delinearized(tree, tuple(repairs))


def _count_leaves(node):
  return sum(1 if c is None else _count_leaves(c) for c in node.children)


def _drop_last_leaves(node, count):
  """Removes the last `count` leaves under `node`; returns how many are still to remove."""
  for i in range(len(node.children) - 1, -1, -1):
    if count == 0:
      break
    child = node.children[i]
    if child is None:
      del node.children[i]
      count -= 1
    else:
      count = _drop_last_leaves(child, count)
  return count


def _has_empty(node):
  return any(c is not None and (_count_leaves(c) == 0 or _has_empty(c)) for c in node.children)


def _build(node, words, pos_placeholder):
  children = []
  for child in node.children:
    if child is None:
      children.append(Tree(pos_placeholder, [next(words)]))
    else:
      built = _build(child, words, pos_placeholder)
      if built is not None:
        children.append(built)
  return Tree(node.label, children) if children else None
