"""The Problem interface the trainer and decoder are written against, and its lookup.

A problem is a dataset (text pairs per split), a direction (source -> target language) and a
vocabulary shared by both sides:

    >>> problem = get_problem("translate_ende_multi30k", raw_data_dir="../shared/data/multi30k")
    >>> vocab = problem.get_vocab("t2t_data")          # builds vocab.<name>.<size>.model once
    >>> batches = problem.dataset("train", "t2t_data", hparams, training=True)
    >>> next(iter(batches))["inputs"].shape             # int32 [B, S], EOS appended, 0-padded
    TensorShape([455, 9])                               # e.g.: 455 pairs * 9 tokens <= 4096

`get_problem` resolves aliases (`translate_ende_wmt32k`) and the `_rev` suffix, which swaps the
direction of any problem (`translate_ende_rev` is DE -> EN with the same vocabulary file).
"""

import importlib
import importlib.util
import logging
import os
import sys

import tensorflow as tf

from t2t_lite import registry
from t2t_lite.data import pipeline, token_shards
from t2t_lite.hparams import DecodeHParams, HParams

logger = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")
REV_SUFFIX = "_rev"


def check_split(split):
  if split not in SPLITS:
    raise ValueError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")


class Problem:
  """Base class: subclasses give `text_dataset` and `get_vocab`; the batching is shared.

  Args:
    raw_data_dir: a folder of local parallel text files to read instead of the problem's default
      source (see `TranslateProblem`); problems that only read local files need it.
  """

  source_language = "en"
  target_language = "de"

  def __init__(self, raw_data_dir: str | None = None):
    self.raw_data_dir = raw_data_dir
    self._name = registry.snake_case(type(self).__name__)

  @property
  def name(self) -> str:
    return self._name

  def __repr__(self):
    return f"<problem {self.name}: {self.source_language} -> {self.target_language}>"

  # --- What a subclass provides. -----------------------------------------------------------------

  def get_vocab(self, data_dir: str | None):
    """The vocabulary (`SubwordVocab` interface), built and cached in `data_dir` if missing."""
    raise NotImplementedError

  def text_dataset(self, split, data_dir):
    """Unbatched tf.data of {"inputs": tf.string, "targets": tf.string}, in the source's order."""
    raise NotImplementedError

  def raw_files(self, split: str) -> list[str]:
    """The local files `split`'s text is read from, if any: datagen's shards of the split are
    used only while these are unchanged. [] for text made in process or from a versioned
    dataset (TFDS)."""
    del split
    return []

  # --- Shared behaviour. -------------------------------------------------------------------------

  def text_pairs(self, split: str, data_dir: str | None) -> list[tuple[str, str]]:
    """Python list of (source, target) strings of a split (for BLEU on dev subsets)."""
    return [(ex["inputs"].decode("utf-8"), ex["targets"].decode("utf-8"))
            for ex in self.text_dataset(split, data_dir).as_numpy_iterator()]

  def token_dataset(self, split, data_dir, input_context=None):
    """Chunks of ids {"inputs", "targets"}: int32 ragged [N, (len)], no EOS, this pipeline's shard.

    Reads the token shards of `t2t-lite-datagen` when they exist for this vocabulary, otherwise
    tokenizes the text in-graph (`pipeline.tokenize`).
    """
    check_split(split)
    vocab = self.get_vocab(data_dir)
    chunks = token_shards.read_token_shards(self.name, split, data_dir, vocab, input_context,
                                            raw_files=self.raw_files(split))
    if chunks is not None:
      return chunks
    texts = pipeline.shard(self.text_dataset(split, data_dir), input_context)
    return pipeline.tokenize(texts, vocab)

  def dataset(self, split: str, data_dir: str | None, hparams: HParams, training: bool,
              input_context: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
    """Batched {"inputs": int32 [B, S], "targets": int32 [B, T]}, EOS appended, 0-padded.

    training=True: long pairs dropped, seeded shuffle, repeats forever from the ids kept in memory
    after the first pass (segmented anew on each pass instead with `hparams.subword_sampling_alpha`
    > 0). training=False: every pair, one pass.
    Batches hold at most `hparams.batch_size` tokens (per replica); see `pipeline`.
    """
    if training and hparams.subword_sampling_alpha > 0:
      # Segmented anew on every pass (the text repeated before tokenizing), never from datagen's
      # token shards, which hold one segmentation.
      check_split(split)
      texts = pipeline.shard(self.text_dataset(split, data_dir), input_context).repeat()
      tokens = pipeline.tokenize(texts, self.get_vocab(data_dir), hparams.subword_sampling_alpha)
    else:
      tokens = self.token_dataset(split, data_dir, input_context)
      if training:
        # Tokenized once: later epochs read the ids from memory (4 bytes a token), in the same
        # shuffled orders. It saves about half of the pipeline's CPU time, which a training
        # pinned to one core (an ensemble member) pays out of its step (docs/data.md).
        tokens = tokens.cache()
    return pipeline.make_batches(tokens, hparams, training, eos_id=self.get_vocab(data_dir).eos_id)

  def default_decode_hparams(self) -> DecodeHParams:
    return DecodeHParams()

  def decode_constraint(self, vocab):
    """A decoding constraint for this problem's outputs (`t2t_lite.decoding.constraints`), or
    None. Parsing problems return one that allows only well-formed trees over the input."""
    del vocab
    return None


class ReversedProblem(Problem):
  """`<name>_rev`: the same data and vocabulary with inputs and targets swapped."""

  def __init__(self, base):
    super().__init__(raw_data_dir=base.raw_data_dir)
    self.base = base
    self._name = base.name + REV_SUFFIX
    self.source_language = base.target_language
    self.target_language = base.source_language

  def get_vocab(self, data_dir):
    return self.base.get_vocab(data_dir)

  def text_dataset(self, split, data_dir):
    return self.base.text_dataset(split, data_dir).map(_swap)

  def text_pairs(self, split, data_dir):
    return [(target, source) for source, target in self.base.text_pairs(split, data_dir)]

  def raw_files(self, split):
    return self.base.raw_files(split)

  def token_dataset(self, split, data_dir, input_context=None):
    return self.base.token_dataset(split, data_dir, input_context).map(_swap)

  def default_decode_hparams(self):
    return self.base.default_decode_hparams()


class VocabProblem(Problem):
  """`base` with another vocabulary: a trained or imported model's own, so a run in its model
  directory (resuming, fine-tuning) tokenizes the data into that model's ids instead of
  building the problem's vocabulary."""

  def __init__(self, base, vocab):
    super().__init__(raw_data_dir=base.raw_data_dir)
    self.base, self.vocab = base, vocab
    self._name = base.name
    self.source_language, self.target_language = base.source_language, base.target_language

  def get_vocab(self, data_dir):
    return self.vocab

  def raw_files(self, split):  # the shards' vocabulary is checked apart (token_shards)
    return self.base.raw_files(split)

  def text_dataset(self, split, data_dir):
    return self.base.text_dataset(split, data_dir)

  def text_pairs(self, split, data_dir):
    return self.base.text_pairs(split, data_dir)

  def default_decode_hparams(self):
    return self.base.default_decode_hparams()

  def decode_constraint(self, vocab):
    return self.base.decode_constraint(vocab)


def _swap(example):
  return {"inputs": example["targets"], "targets": example["inputs"]}


def get_problem(name: str, raw_data_dir: str | None = None, **kwargs) -> Problem:
  """The problem registered as `name` (or an alias), reversed for a `_rev` suffix.

  Args:
    name: e.g. "translate_ende", "translate_ende_wmt32k", "translate_ende_rev".
    raw_data_dir: read local parallel files from this folder instead of the default source.
    **kwargs: more constructor arguments (e.g. `split_files` of a `TranslateProblem`).

  Raises:
    t2t_lite.registry.RegistryError: unknown name; the message lists the registered problems and
      the closest match.
  """
  if name not in registry.problems and name.endswith(REV_SUFFIX):
    base_name = name[:-len(REV_SUFFIX)]
    if base_name not in registry.problems:
      raise registry.RegistryError(registry.problems.unknown_message(name) +
                                   f" Any of them takes the suffix {REV_SUFFIX!r}.")
    return ReversedProblem(get_problem(base_name, raw_data_dir, **kwargs))
  canonical = registry.problems.canonical(name)
  problem = registry.problems.get(canonical)(raw_data_dir=raw_data_dir, **kwargs)
  problem._name = canonical  # pylint: disable=protected-access
  return problem


def import_usr_dir(path: str):
  """Imports a user's module or package so its `@registry.problems.register` lines run.

  T2T's `--t2t_usr_dir`: `path` is a folder (a package, imported by its folder name with its
  parent put on sys.path) or a single `.py` file. Importing the same path twice is harmless.

  Example:
      >>> import_usr_dir("~/my_problems")       # ~/my_problems/__init__.py registers MyProblem
      >>> get_problem("my_problem")
  """
  path = os.path.abspath(os.path.expanduser(path)).rstrip(os.sep)
  if not os.path.exists(path):
    raise FileNotFoundError(f"usr_dir {path} does not exist; give a folder with an __init__.py "
                            "(or a .py file) that registers problems")
  if os.path.isfile(path):
    module_name = "t2t_lite_usr_" + os.path.splitext(os.path.basename(path))[0]
    if module_name in sys.modules:
      return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
      spec.loader.exec_module(module)
    except BaseException:
      del sys.modules[module_name]
      raise
    return module
  parent, module_name = os.path.split(path)
  if module_name in sys.modules:
    return sys.modules[module_name]
  if parent not in sys.path:
    sys.path.insert(0, parent)
  logger.info("importing user module %s from %s", module_name, parent)
  return importlib.import_module(module_name)
