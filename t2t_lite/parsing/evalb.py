"""Labeled bracket precision, recall and F1 as EVALB computes them with COLLINS.prm.

The convention every parsing paper reports (and the paper's 91.3 F1 on WSJ section 23):

- a bracket is (label, start, end) of a constituent; part-of-speech (preterminal) brackets are
  not counted; the root wrapper (`TOP`, `ROOT` or an empty label) is not counted, the real root
  (`S`, ...) is;
- words tagged `,` `:` `` `` `` `''` `.` (punctuation) and `-NONE-` are deleted before spans are
  measured, so constituents differing only in where punctuation attaches match; a constituent
  covering only deleted words is ignored;
- `ADVP` and `PRT` are the same label (COLLINS.prm's EQ_LABEL); labels are cut at `-` or `=`;
- brackets match one to one, with multiplicity: a unary chain `(NP (NP ...))` has two NP brackets
  over one span, matched at most twice;
- precision = matched / test brackets, recall = matched / gold brackets, summed over the corpus;
  a sentence whose words differ from the gold sentence's is skipped and counted as an error.

Which words are punctuation comes from the GOLD tree's tags, for both trees: our parser's trees
have the placeholder tag `XX` on every word (the tags were collapsed in training), and their
words are the gold words in the same order (`linearize.tree_from_linearized` restores them), so
the gold tags are the only ones there are. EVALB with real tags on both sides gives the same
result whenever the parser's punctuation tags equal the gold ones.

    >>> gold = read_trees("(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))")[0]
    >>> test = read_trees("(S (XX The) (VP (XX cat) (XX sat)) (XX .))")[0]
    >>> evaluate([gold], [test]).f1     # only S matches: P = 1/2, R = 1/3
    40.0
"""

import collections
import dataclasses

from t2t_lite.parsing import linearize as linearize_lib
from t2t_lite.parsing.trees import ROOT_LABELS, Tree

PUNCTUATION_TAGS = frozenset({",", ":", "``", "''", "."})
DELETED_TAGS = PUNCTUATION_TAGS | {"-NONE-"}
EQUAL_LABELS = {"PRT": "ADVP"}
CUTOFF_LENGTH = 40                      # EVALB's second table: sentences of at most 40 words


def _label(label):
  for i, ch in enumerate(label):
    if ch in "-=" and i > 0:
      label = label[:i]
      break
  return EQUAL_LABELS.get(label, label)


def brackets(tree, deleted):
  """Counter of (label, start, end), spans counted in kept words; `deleted[i]`: drop word i."""
  counts = collections.Counter()
  word = kept = 0            # index of the next word; kept words before it

  def visit(node, is_root):
    nonlocal word, kept
    if node.is_preterminal:
      kept += not deleted[word]
      word += 1
      return
    start = kept
    for child in node.children:
      visit(child, False)
    label = _label(node.label)
    if kept > start and label not in DELETED_TAGS and label != "TOP" and \
        not (is_root and node.label in ROOT_LABELS):
      counts[(label, start, kept)] += 1

  visit(tree, True)
  return counts


@dataclasses.dataclass
class Scores:
  """Corpus totals; precision, recall and f1 in percent (0 when undefined)."""
  matched: int = 0
  gold_brackets: int = 0
  test_brackets: int = 0
  sentences: int = 0
  error_sentences: int = 0          # word sequences differing: skipped, as EVALB does
  complete_match: int = 0           # sentences with every bracket right

  @property
  def precision(self):
    return 100.0 * self.matched / self.test_brackets if self.test_brackets else 0.0

  @property
  def recall(self):
    return 100.0 * self.matched / self.gold_brackets if self.gold_brackets else 0.0

  @property
  def f1(self):
    p, r = self.precision, self.recall
    return 2 * p * r / (p + r) if p + r else 0.0

  def add(self, matched, gold, test):
    self.sentences += 1
    self.matched += matched
    self.gold_brackets += gold
    self.test_brackets += test
    self.complete_match += int(matched == gold == test)

  def __str__(self):
    return (f"P {self.precision:.2f} R {self.recall:.2f} F1 {self.f1:.2f} "
            f"({self.matched} matched, {self.gold_brackets} gold, {self.test_brackets} test "
            f"brackets; {self.sentences} sentences, {self.complete_match} complete, "
            f"{self.error_sentences} skipped)")


@dataclasses.dataclass
class EvalbResult:
  """`all` sentences and those of at most 40 words (`short`), as EVALB's two summaries."""
  all: Scores
  short: Scores

  @property
  def precision(self):
    return self.all.precision

  @property
  def recall(self):
    return self.all.recall

  @property
  def f1(self):
    return self.all.f1


def sentence_counts(gold, test):
  """(matched, gold brackets, test brackets) of one sentence; None if the words differ."""
  gold_pos = gold.pos()
  if [w for _, w in gold_pos] != test.leaves():
    return None
  deleted = [tag in DELETED_TAGS for tag, _ in gold_pos]
  gold_brackets, test_brackets = brackets(gold, deleted), brackets(test, deleted)
  matched = sum((gold_brackets & test_brackets).values())
  return matched, sum(gold_brackets.values()), sum(test_brackets.values())


def evaluate(gold_trees, test_trees):
  """EVALB (COLLINS.prm) scores of test trees against gold trees, pairwise in order.

  Raises:
    ValueError: the two lists differ in length.
  """
  gold_trees, test_trees = list(gold_trees), list(test_trees)
  if len(gold_trees) != len(test_trees):
    raise ValueError(f"{len(test_trees)} test trees for {len(gold_trees)} gold trees; "
                     "give one test tree per gold tree, in the same order")
  result = EvalbResult(Scores(), Scores())
  for gold, test in zip(gold_trees, test_trees):
    counts = sentence_counts(gold, test)
    length = sum(tag != "-NONE-" for tag, _ in gold.pos())
    for scores in (result.all, result.short) if length <= CUTOFF_LENGTH else (result.all,):
      if counts is None:
        scores.sentences += 1
        scores.error_sentences += 1
      else:
        scores.add(*counts)
  return result


@dataclasses.dataclass
class DecodedScores:
  """`evaluate_linearized`'s result: EVALB scores, how many decoded trees had exactly one leaf
  per word as decoded (before any repair), and how many needed repair (and which repairs)."""
  evalb: EvalbResult
  repaired: int
  repairs: collections.Counter
  leaf_count_right: int = 0
  trees: list = dataclasses.field(default_factory=list, repr=False)   # the (repaired) trees

  def __str__(self):
    kinds = ", ".join(f"{kind} {n}" for kind, n in self.repairs.most_common()) or "none"
    total = self.evalb.all.sentences
    return (f"all sentences:   {self.evalb.all}\n"
            f"<= {CUTOFF_LENGTH} words:     {self.evalb.short}\n"
            f"leaf count right before repair: {self.leaf_count_right} of {total}"
            f" ({100.0 * self.leaf_count_right / max(total, 1):.1f}%)\n"
            f"trees repaired: {self.repaired} of {total} ({kinds})")


def with_tags(tree, tags):
  """A copy of `tree` whose preterminals carry `tags` (e.g. the gold tags), left to right."""
  tags = iter(tags)

  def copy(node):
    if node.is_preterminal:
      return Tree(next(tags), node.children)
    return Tree(node.label, [copy(child) for child in node.children])

  return copy(tree)


def evaluate_linearized(decoded_lines, gold_trees):
  """Scores decoded linearized trees (one per gold tree, same order) against the gold trees.

  Each line is repaired and given the gold words (`linearize.tree_from_linearized`); a line
  with tab-separated beams (`return_beams`) is scored by its first beam. Any linearization
  reads back (a leaf is any token that is not a bracket). The returned trees carry the gold
  tags, so they can be written in PTB format and scored by the real EVALB too.

  Raises:
    ValueError: the number of lines differs from the number of gold trees.
  """
  decoded_lines, gold_trees = list(decoded_lines), list(gold_trees)
  if len(decoded_lines) != len(gold_trees):
    raise ValueError(f"{len(decoded_lines)} decoded lines for {len(gold_trees)} gold trees; "
                     "decode the inputs of the same split, one line per sentence, in order")
  repairs = collections.Counter()
  repaired = leaf_count_right = 0
  test_trees = []
  for line, gold in zip(decoded_lines, gold_trees):
    first_beam = line.split("\t")[0]
    gold_pos = gold.pos()
    leaves = [t for t in first_beam.split() if not t.startswith(("(", ")"))]
    leaf_count_right += len(leaves) == len(gold_pos)
    result = linearize_lib.tree_from_linearized(first_beam, [w for _, w in gold_pos])
    repaired += result.repaired
    repairs.update(result.repairs)
    test_trees.append(with_tags(result.tree, [tag for tag, _ in gold_pos]))
  return DecodedScores(evaluate(gold_trees, test_trees), repaired, repairs, leaf_count_right,
                       test_trees)
