"""Algorithmic problems (T2T's `algorithmic_*`): tiny synthetic tasks for smoke tests.

Inputs are random sequences of symbols 2..num_symbols+1 (ids 0 and 1 are PAD and EOS, see
`t2t_lite.token_ids`) with lengths 1..max_length; the target is a function of the input
(reversed, copied). Examples are generated in process from a seeded generator, so every run sees
the same data, and need no files or downloads.
Text is the symbols' ids in decimal, space separated: "4 2 11".

    >>> problem = get_problem("algorithmic_reverse")
    >>> problem.text_pairs("dev")[0]
    ('4 3 4 6 10 6 2 5 8 10 9 11 3 10 2 7 4', '4 7 2 10 3 11 9 10 8 5 2 6 10 6 4 3 4')
"""

import numpy as np
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.data.vocab import SymbolVocab
from t2t_lite.hparams import DecodeHParams
from t2t_lite.problems.base import Problem, check_split


class AlgorithmicProblem(Problem):
  """Random symbol sequences; subclasses say what the target is (`target_symbols`)."""

  source_language = target_language = "symbols"
  num_symbols = 10
  max_length = 20
  split_sizes = {"train": 10_000, "dev": 200, "test": 200}
  split_seeds = {"train": 1, "dev": 2, "test": 3}

  def target_symbols(self, symbols):
    raise NotImplementedError

  def generate(self, split):
    """[(input ids, target ids), ...] of a split; the same on every call."""
    check_split(split)
    rng = np.random.default_rng(self.split_seeds[split])
    pairs = []
    for _ in range(self.split_sizes[split]):
      length = int(rng.integers(1, self.max_length + 1))
      symbols = [int(s) for s in rng.integers(2, self.num_symbols + 2, size=length)]
      pairs.append((symbols, self.target_symbols(symbols)))
    return pairs

  def get_vocab(self, data_dir=None):
    return SymbolVocab(self.num_symbols)

  def text_pairs(self, split, data_dir=None):
    return [(" ".join(map(str, source)), " ".join(map(str, target)))
            for source, target in self.generate(split)]

  def text_dataset(self, split, data_dir=None):
    sources, targets = zip(*self.text_pairs(split))
    return tf.data.Dataset.from_tensor_slices({"inputs": list(sources), "targets": list(targets)})

  def default_decode_hparams(self):
    # The answer is as long as the question: greedy decoding, a few spare steps.
    return DecodeHParams(beam_size=1, alpha=0.0, extra_length=5)


@registry.problems.register
class AlgorithmicReverse(AlgorithmicProblem):
  """Target = the input reversed: "2 5 7" -> "7 5 2"."""

  def target_symbols(self, symbols):
    return symbols[::-1]


@registry.problems.register
class AlgorithmicCopy(AlgorithmicProblem):
  """Target = the input: "2 5 7" -> "2 5 7" (T2T's algorithmic_identity)."""

  def target_symbols(self, symbols):
    return list(symbols)
