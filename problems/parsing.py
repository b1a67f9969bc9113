"""English constituency parsing as translation (paper section 6.3): words -> linearized tree.

    >>> problem = get_problem("parsing_english_ptb16k", raw_data_dir="../shared/data/ptb_sample")
    >>> problem.text_pairs("train")[0]
    ('Pierre Vinken , 61 years old , will join the board as a nonexecutive director Nov. 29 .',
     '(S (NP (NP Pierre Vinken ) , (ADJP (NP 61 years ) old ) , ) (VP will (VP join (NP the board ) (PP as (NP a nonexecutive director ) ) (NP Nov. 29 ) ) ) . )')

The data is the WSJ Penn Treebank as `.mrg` files in `raw_data_dir` (nothing is downloaded;
the treebank is licensed by the LDC):

- the full treebank: section folders 00..24 (in `raw_data_dir`, or its `parsed/mrg/wsj` or
  `wsj` subfolder); train = sections 02-21 (39,832 sentences), dev = 22, test = 23, the split
  of the paper and of every WSJ parsing result;
- a flat folder such as the NLTK 10% sample `../shared/data/ptb_sample`: train =
  wsj_0001-0159 (3,396 trees), dev = wsj_0160-0179 (273 trees), test = dev.

Inputs are the words, space separated; targets are the cleaned trees (function tags, empty
elements and the root wrapper removed), linearized (`t2t_lite.parsing.linearize`) with one of
three leaf tokens, a problem option chosen by the registered name:

| name | leaves | |
|---|---|---|
| `parsing_english_ptb16k` | the words | the default (see docs/parsing.md for why) |
| `parsing_english_ptb16k_words` | the words: `(S (NP Vinken ) (VP is ...` | the same as the default |
| `parsing_english_ptb16k_xx` | `XX`: `(S (NP XX ) (VP XX ...` | Vinyals et al. 2014, the paper's |
| `parsing_english_ptb16k_tags` | the tags: `(S (NP NNP ) (VP VBZ ...` | T2T's `wsj_parsing` |

and the same four with `ptb8k` (an 8K vocabulary). A decoded target is turned back into a tree
over the input words and scored with EVALB's conventions by `t2t-lite-parse-eval`
(`t2t_lite.parsing.evalb`). Decoding is constrained by default (`decode_constraint`,
`t2t_lite.parsing.constraint.TreeConstraint`): every output is one well-formed tree with one
leaf per input word (with word leaves, exactly the input's pieces); `constrained=false` in the
decode hparams gives the paper's unconstrained search.

The vocabulary is shared by both sides, as in the paper: a SentencePiece BPE model in which every
bracket token (`(NP`, `)`, and the `XX` or tag leaves, with the space before it) is one
user-defined piece, so a tree token is exactly one piece (a word leaf is the word's pieces, the
same as in the input). Its size is the one in the name on the full treebank; with less text it
is one piece per 20 running training words, rounded down to thousands, at least 1000 (4000 on
the sample): pieces seen too rarely to learn are split instead.
"""

import os

from t2t_lite import registry
from t2t_lite.data import vocab as vocab_lib
from t2t_lite.hparams import DecodeHParams
from t2t_lite.parsing import linearize, treebank
from t2t_lite.parsing.constraint import SPACE_PIECE, TreeConstraint
from t2t_lite.problems.base import Problem, check_split

# The nonterminal labels of the Penn Treebank (Bies et al. 1995), kept whole in any vocabulary.
PTB_LABELS = ("ADJP", "ADVP", "CONJP", "FRAG", "INTJ", "LST", "NAC", "NP", "NX", "PP", "PRN",
              "PRT", "QP", "RRC", "S", "SBAR", "SBARQ", "SINV", "SQ", "UCP", "VP", "WHADJP",
              "WHADVP", "WHNP", "WHPP", "X")
# Its part-of-speech tags (Santorini 1990), the leaves of the "tags" linearization.
PTB_TAGS = ("#", "$", "''", ",", "-LRB-", "-RRB-", ".", ":", "CC", "CD", "DT", "EX", "FW", "IN",
            "JJ", "JJR", "JJS", "LS", "MD", "NN", "NNP", "NNPS", "NNS", "PDT", "POS", "PRP",
            "PRP$", "RB", "RBR", "RBS", "RP", "SYM", "TO", "UH", "VB", "VBD", "VBG", "VBN", "VBP",
            "VBZ", "WDT", "WP", "WP$", "WRB", "``")
WORDS_PER_PIECE = 20
MIN_VOCAB_SIZE = 1000
DEFAULT_LINEARIZATION = "words"


class ParsingEnglishPtb(Problem):
  """WSJ Penn Treebank constituency parsing: words -> linearized tree (see the module docstring).

  Args:
    raw_data_dir: the treebank folder (full WSJ with section folders, or a flat folder).
    approx_vocab_size: overrides the vocabulary size (default: the name's, less on small data).
  """

  source_language = "en"
  target_language = "en_tree"
  approx_vocab_size = 16000
  linearization = DEFAULT_LINEARIZATION

  def __init__(self, raw_data_dir=None, approx_vocab_size=None):
    super().__init__(raw_data_dir)
    self._vocab_size = approx_vocab_size
    self._trees = {}
    self._vocabs = {}

  def trees(self, split):
    """The cleaned gold trees of a split (`t2t_lite.parsing.trees.Tree`), read once."""
    check_split(split)
    if self.raw_data_dir is None:
      raise treebank.TreebankError(f"{self.name} reads local Penn Treebank files: pass "
                                   f"raw_data_dir (or --raw_data_dir), {treebank.EXPECTED_LAYOUT}")
    if split not in self._trees:
      self._trees[split] = treebank.read_split(self.raw_data_dir, split)
    return self._trees[split]

  # --- The Problem interface. --------------------------------------------------------------------

  def text_pairs(self, split, data_dir=None):
    return [linearize.text_pair(tree, self.linearization) for tree in self.trees(split)]

  def text_dataset(self, split, data_dir=None):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    inputs, targets = zip(*self.text_pairs(split))
    return tf.data.Dataset.from_tensor_slices({"inputs": list(inputs), "targets": list(targets)})

  def default_decode_hparams(self):
    # Section 6.3: "maximum output length to input length + 300 ... beam size of 21 and alpha = 0.3".
    return DecodeHParams(beam_size=21, alpha=0.3, extra_length=300)

  def decode_constraint(self, vocab):
    """Only well-formed trees with one leaf per input word (`TreeConstraint`)."""
    return TreeConstraint.for_vocab(vocab, self.linearization)

  # --- Vocabulary. -------------------------------------------------------------------------------

  def vocab_size(self):
    """The name's size, or one piece per `WORDS_PER_PIECE` training words when that is less."""
    if self._vocab_size:
      return self._vocab_size
    words = sum(len(tree.leaves()) for tree in self.trees("train"))
    scaled = max(MIN_VOCAB_SIZE, words // WORDS_PER_PIECE // 1000 * 1000)
    return min(self.approx_vocab_size, scaled)

  def leaf_symbols(self):
    """The leaf tokens of the targets: `["XX"]`, the tags, or none (the words)."""
    if self.linearization == "xx":
      return [linearize.POS_PLACEHOLDER]
    if self.linearization == "tags":
      tags = set(PTB_TAGS)
      tags.update(tag for tree in self.trees("train") for tag, _ in tree.pos())
      return sorted(tags)
    return []

  def bracket_symbols(self):
    """The tree tokens as whole pieces: "\u2581(NP", ..., "\u2581)", and the leaf symbols."""
    labels = set(PTB_LABELS)
    for _, target in self.text_pairs("train"):
      labels.update(token[1:] for token in target.split() if token.startswith("("))
    tokens = ["(" + label for label in sorted(labels)] + [")"] + self.leaf_symbols()
    return [SPACE_PIECE + token for token in tokens]

  def vocab_lines(self):
    for source, target in self.text_pairs("train"):
      yield source
      yield target

  def get_vocab(self, data_dir):
    """`<data_dir>/vocab.<problem name>.<size>.model`, built from the train split once."""
    size = self.vocab_size()
    path = os.path.join(data_dir, f"vocab.{self.name}.{size}.model")
    if path not in self._vocabs:
      corpus = f"ptb:{os.path.abspath(self.raw_data_dir)}:train:{self.linearization}"
      self._vocabs[path] = vocab_lib.get_or_build_subword_vocab(
          path, self.vocab_lines, size, corpus, user_defined_symbols=self.bracket_symbols())
    return self._vocabs[path]


def _register(size):
  for linearization in ("",) + linearize.LINEARIZATIONS:
    name = f"parsing_english_ptb{size // 1000}k" + (f"_{linearization}" if linearization else "")
    attributes = {"approx_vocab_size": size,
                  "linearization": linearization or DEFAULT_LINEARIZATION,
                  "__doc__": ParsingEnglishPtb.__doc__}
    registry.problems.register(type(name, (ParsingEnglishPtb,), attributes), name=name)


_register(16000)
_register(8000)
