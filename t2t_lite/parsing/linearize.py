"""Trees as token sequences (the model's targets) and decoded sequences back into trees.

The format: an opening bracket glued to its label, one leaf token per word, a plain closing
bracket, tokens separated by single spaces. Three linearizations differ in the leaf token:

    (S (NP (NNP Vinken)) (VP (VBZ is) (NP (NN chairman))) (. .))     inputs "Vinken is chairman ."

    "xx"     (S (NP XX ) (VP XX (NP XX ) ) XX )                Vinyals & Kaiser et al. 2014
    "tags"   (S (NP NNP ) (VP VBZ (NP NN ) ) . )               T2T's wsj_parsing (real tags)
    "words"  (S (NP Vinken ) (VP is (NP chairman ) ) . )        the words themselves

"xx" collapses the part-of-speech tags (Vinyals et al.'s setting, and the paper's); "tags" keeps
them, as T2T's `wsj_parsing` data generator does (it writes `/NP` for a closing bracket, which
carries no information our `)` lacks); "words" puts the input words at the leaves, so the
decoder sees what it has attached so far and its leaves are a copy of the input.

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
LINEARIZATIONS = ("xx", "tags", "words")


def check_linearization(linearization):
  if linearization not in LINEARIZATIONS:
    raise ValueError(f"unknown linearization {linearization!r}; use one of "
                     f"{', '.join(LINEARIZATIONS)} (see t2t_lite.parsing.linearize)")


def linearize(tree, linearization="xx", pos_placeholder=POS_PLACEHOLDER):
  """`(S (NP (NNP Vinken)) (. .))` -> `"(S (NP XX ) XX )"` ("xx"), `"(S (NP NNP ) . )"` ("tags")
  or `"(S (NP Vinken ) . )"` ("words")."""
  check_linearization(linearization)
  tokens = []

  def visit(node):
    if node.is_preterminal:
      tokens.append({"xx": pos_placeholder, "tags": node.label,
                     "words": node.children[0]}[linearization])
      return
    tokens.append("(" + node.label)
    for child in node.children:
      visit(child)
    tokens.append(")")

  visit(tree)
  return " ".join(tokens)


def text_pair(tree, linearization="xx"):
  """(inputs, targets) of a cleaned tree: the words space-joined, the linearized tree."""
  return " ".join(tree.leaves()), linearize(tree, linearization)


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
    self.children = []   # _Node, or a leaf: None, or its tag (a str) with leaf_tags


def tree_from_linearized(text, words, pos_placeholder=POS_PLACEHOLDER, leaf_tags=False):
  """A linearized (decoded) tree with the input words restored at its leaves.

  Args:
    text: e.g. "(S (NP XX ) (VP XX ) XX )"; malformed sequences are repaired (module docstring).
      Any token that is not a bracket is a leaf, so every linearization reads back.
    words: the input words (a list, or the input line).
    pos_placeholder: the tag given to every leaf.
    leaf_tags: the leaf tokens are part-of-speech tags (the "tags" linearization): each word
      gets its leaf token as its tag (leaves appended by a repair get `pos_placeholder`).

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
      stack[-1].children.append(token if leaf_tags else None)
  if len(stack) > 1:
    repairs.append("unclosed")

  constituents = [c for c in top.children if not _is_leaf(c)]
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


def _is_leaf(child):
  return not isinstance(child, _Node)


def _count_leaves(node):
  return sum(1 if _is_leaf(c) else _count_leaves(c) for c in node.children)


def _drop_last_leaves(node, count):
  """Removes the last `count` leaves under `node`; returns how many are still to remove."""
  for i in range(len(node.children) - 1, -1, -1):
    if count == 0:
      break
    child = node.children[i]
    if _is_leaf(child):
      del node.children[i]
      count -= 1
    else:
      count = _drop_last_leaves(child, count)
  return count


def _has_empty(node):
  return any(not _is_leaf(c) and (_count_leaves(c) == 0 or _has_empty(c)) for c in node.children)


def _build(node, words, pos_placeholder):
  children = []
  for child in node.children:
    if _is_leaf(child):
      children.append(Tree(child or pos_placeholder, [next(words)]))
    else:
      built = _build(child, words, pos_placeholder)
      if built is not None:
        children.append(built)
  return Tree(node.label, children) if children else None
