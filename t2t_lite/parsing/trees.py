"""Penn Treebank trees: a small reader for `.mrg` s-expressions and the usual cleanup.

A tree is a `Tree(label, children)`; a child is a `Tree` or a word (str). A preterminal is a
tree whose only child is a word: `Tree("NN", ["board"])`.

    >>> [tree] = read_trees("( (S (NP-SBJ (NNP Vinken) ) (VP (VBZ is) (NP (-NONE- *T*-1) )) (. .) ))")
    >>> str(clean_tree(tree))
    '(S (NP (NNP Vinken)) (VP (VBZ is)) (. .))'

`clean_tree` is the standard preprocessing of parsing papers (Vinyals & Kaiser et al. 2014 and
the paper's section 6.3 follow it): the unlabeled outer bracket `( (S ...) )` is unwrapped,
`-NONE-` empty elements and the constituents left empty by their removal are dropped, and
function tags and indices are stripped (`NP-SBJ-1` -> `NP`, `PP-LOC=2` -> `PP`); labels that
start with `-` (`-LRB-`, `-RRB-`) are kept whole.
"""

import bisect
import re

EMPTY_ELEMENT = "-NONE-"
ROOT_LABELS = ("", "TOP", "ROOT")        # wrapper brackets unwrapped by clean_tree

_TOKEN = re.compile(r"\(|\)|[^\s()]+")


class TreeFormatError(ValueError):
  """A malformed bracketing; the message names the file and the line:column of the problem."""


class Tree:
  """A constituent: `label` (str) and `children` (a list of `Tree` or word strings)."""

  __slots__ = ("label", "children")

  def __init__(self, label, children=()):
    self.label = label
    self.children = list(children)

  @property
  def is_preterminal(self):
    return len(self.children) == 1 and isinstance(self.children[0], str)

  def leaves(self):
    """The words, left to right."""
    return [word for _, word in self.pos()]

  def pos(self):
    """[(tag, word), ...] of the preterminals, left to right."""
    out = []
    stack = [self]
    while stack:
      node = stack.pop()
      if node.is_preterminal:
        out.append((node.label, node.children[0]))
      else:
        stack.extend(reversed([c for c in node.children if isinstance(c, Tree)]))
    return out

  def __eq__(self, other):
    return isinstance(other, Tree) and str(self) == str(other)

  def __hash__(self):
    return hash(str(self))

  def __str__(self):
    """One line in Penn Treebank format: `(S (NP (DT the) (NN board)) (. .))`."""
    parts = []
    self._write(parts)
    return "".join(parts)

  def _write(self, parts):
    parts.append("(" + self.label)
    for child in self.children:
      parts.append(" ")
      if isinstance(child, Tree):
        child._write(parts)  # pylint: disable=protected-access
      else:
        parts.append(child)
    parts.append(")")

  def __repr__(self):
    return f"Tree({str(self)!r})"


# --- Reading. --------------------------------------------------------------------------------------

def read_trees(text, source="<string>"):
  """All trees of a bracketed text, as written (no cleanup).

  Args:
    text: one or more s-expressions, e.g. the content of a `.mrg` file.
    source: the file name used in error messages.

  Raises:
    TreeFormatError: unbalanced brackets, a word outside any bracket, a bracket without children
      or with more than one word; the message says `source:line:column`.
  """
  line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

  def where(offset):
    line = bisect.bisect_right(line_starts, offset)
    return f"{source}:{line}:{offset - line_starts[line - 1] + 1}"

  def fail(offset, message):
    raise TreeFormatError(f"{where(offset)}: {message}")

  trees = []
  stack = []       # [(Tree, offset of its "(")]
  pending = None   # offset of a "(" whose label has not been read yet
  for match in _TOKEN.finditer(text):
    token, offset = match.group(), match.start()
    if pending is not None:                    # the token after "(": a label, or "(" for none
      if token == ")":
        fail(pending, "empty bracket '()'")
      node = Tree("" if token == "(" else token)
      if stack:
        stack[-1][0].children.append(node)
      stack.append((node, pending))
      pending = None
      if token != "(":
        continue
    if token == "(":
      if stack and any(isinstance(c, str) for c in stack[-1][0].children):
        fail(offset, f"bracket after a word inside ({stack[-1][0].label} ...)")
      pending = offset
    elif token == ")":
      if not stack:
        fail(offset, "unmatched ')'")
      node, opened = stack.pop()
      if not node.children:
        fail(opened, f"bracket ({node.label}) has no children")
      if not stack:
        trees.append(node)
    else:
      if not stack:
        fail(offset, f"word {token!r} outside any bracket")
      node = stack[-1][0]
      if node.children:
        what = "a second word" if isinstance(node.children[0], str) else "a word after a bracket"
        fail(offset, f"{what} {token!r} inside ({node.label} ...)")
      node.children.append(token)
  if pending is not None:
    fail(pending, "'(' at the end of the text")
  if stack:
    fail(stack[-1][1], f"this '(' is never closed ({len(stack)} bracket(s) still open at the end "
                       "of the text; this is the innermost)")
  return trees


def read_mrg_file(path):
  """The trees of one `.mrg` file, as written (see `read_trees`)."""
  with open(path, encoding="utf-8", errors="replace") as f:
    return read_trees(f.read(), source=str(path))


# --- Cleanup. --------------------------------------------------------------------------------------

def strip_label(label):
  """`NP-SBJ-1` -> `NP`, `PP-LOC=2` -> `PP`, `ADVP|PRT` -> `ADVP`; `-NONE-`, `-LRB-` unchanged."""
  if label.startswith("-"):
    return label
  return re.split(r"[-=|]", label, maxsplit=1)[0] or label


def clean_tree(tree):
  """The tree without its root wrapper, empty elements and function tags (a new tree).

  Returns None when nothing but empty elements is left.
  """
  while tree.label in ROOT_LABELS and len(tree.children) == 1 and isinstance(tree.children[0], Tree):
    tree = tree.children[0]
  return _clean(tree)


def _clean(node):
  if node.is_preterminal:
    return None if node.label == EMPTY_ELEMENT else Tree(node.label, node.children)
  children = [c for c in (_clean(child) for child in node.children) if c is not None]
  return Tree(strip_label(node.label), children) if children else None
