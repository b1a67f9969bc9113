"""The shared subword vocabulary (and the trivial one of the algorithmic problems).

One vocabulary serves both languages, as in the paper (section 5.1: "a shared source-target
vocabulary of about 37000 tokens") and T2T. It is a SentencePiece BPE model, trained with the
`sentencepiece` package on the training text of BOTH languages, because:

- detokenization is exact: with `normalization_rule_name="identity"`, no whitespace clean-up and
  byte fallback (characters outside the vocabulary become UTF-8 byte pieces instead of <unk>),
  `detokenize(tokenize(s)) == s` for every line of newstest2014 (a test checks it). BLEU is
  computed on real text, never on subwords. The one whitespace normalization: the in-graph
  `detokenize` (tensorflow-text's SentencePiece) drops spaces at the very start of a line; runs of
  spaces, tabs, trailing spaces and non-ASCII spaces are kept, and Python `decode` is exact;
- it runs in-graph through tensorflow-text's `SentencepieceTokenizer`, so a SavedModel can take
  and return plain strings (T2T's exporter took serialized ids, issue #990);
- keras-hub uses the same format (`SentencePieceTokenizer`), so the model file is reusable there.

Ids: `t2t_lite.token_ids` (PAD=0, EOS=1, UNK=2, no BOS: T2T's convention; sentencepiece pad_id=0,
eos_id=1, unk_id=2, bos_id=-1). `tokenize` never adds EOS: the pipeline appends it.

Training is deterministic: the text is sampled with a seeded reservoir (so a 4.5M-pair corpus is
never held in memory, only `input_sentence_size` lines), written in a fixed order, and trained
with sentencepiece's own sampling and shuffling off and one thread.
"""

import hashlib
import json
import logging
import os
import random
import re
import tempfile

import sentencepiece as spm
import tensorflow as tf
import tensorflow_text as tf_text

from t2t_lite.token_ids import EOS_ID, PAD_ID, UNK_ID

logger = logging.getLogger(__name__)

DEFAULT_INPUT_SENTENCE_SIZE = 1_000_000
DEFAULT_SEED = 1234
SYMBOL_PROTO_PREFIX = b'{"type": "symbols", "num_symbols": '


def strip_after_eos(ids, vocab_size):
  """Ragged ids: everything from the first EOS on, PAD and out-of-vocabulary ids removed.

  Example:
      >>> strip_after_eos(tf.constant([[5, 6, 1, 7], [8, 0, 0, 0]]), 100)
      <tf.RaggedTensor [[5, 6], [8]]>
  """
  if isinstance(ids, tf.RaggedTensor):
    ids = ids.to_tensor(PAD_ID)
  ids = tf.cast(ids, tf.int32)                                      # [N, L]
  before_eos = tf.equal(tf.cumsum(tf.cast(tf.equal(ids, EOS_ID), tf.int32), axis=1), 0)
  keep = before_eos & (ids != PAD_ID) & (ids < vocab_size) & (ids >= 0)
  return tf.ragged.boolean_mask(ids, keep)                          # [N, (len)]


def strip_ids(ids):
  """Python ids cut at the first EOS, PAD dropped."""
  ids = [int(i) for i in ids]
  if EOS_ID in ids:
    ids = ids[:ids.index(EOS_ID)]
  return [i for i in ids if i != PAD_ID]


class SubwordVocab:
  """A SentencePiece model with T2T's ids and both in-graph and Python encoding.

  Args:
    model_proto: the serialized SentencePiece model (the bytes of a `.model` file).

  Example:
      >>> vocab = SubwordVocab.from_file("data/vocab.translate_ende.37000.model")
      >>> vocab.encode("Hello world")           # ids depend on the corpus
      [320, 7697, 7831]
      >>> vocab.detokenize(vocab.tokenize(tf.constant(["Hello world"]))).numpy()
      array([b'Hello world'], dtype=object)
  """

  pad_id = PAD_ID
  eos_id = EOS_ID

  def __init__(self, model_proto):
    self.model_proto = bytes(model_proto)
    self._processor = spm.SentencePieceProcessor(model_proto=self.model_proto)
    if self._processor.pad_id() != PAD_ID or self._processor.eos_id() != EOS_ID:
      raise ValueError(f"sentencepiece model has pad_id={self._processor.pad_id()}, "
                       f"eos_id={self._processor.eos_id()}; t2t_lite needs pad_id=0, eos_id=1 "
                       "(train it with build_subword_vocab)")
    self.vocab_size = self._processor.vocab_size()
    # A tf.Module: track it inside a model/tf.Module and it is saved with a SavedModel.
    self.tf_tokenizer = tf_text.SentencepieceTokenizer(model=self.model_proto, out_type=tf.int32)

  @classmethod
  def from_file(cls, path):
    """The vocabulary saved at `path` (a `.model` file, or any vocab's `model_proto` bytes)."""
    with open(path, "rb") as f:
      return vocab_from_proto(f.read())

  load = from_file

  def tokenize(self, texts):
    """tf.string [N] -> tf.RaggedTensor int32 [N, (len)], no EOS."""
    return self.tf_tokenizer.tokenize(texts)

  def detokenize(self, ids):
    """int ids [N, L] (dense or ragged) -> tf.string [N]; stops at the first EOS, drops PAD."""
    return self.tf_tokenizer.detokenize(strip_after_eos(ids, self.vocab_size))

  def encode(self, text):
    return self._processor.encode(text)

  def decode(self, ids):
    return self._processor.decode(strip_ids(ids))

  def id_to_piece(self, ids):
    return [self._processor.id_to_piece(int(i)) for i in ids]

  def user_defined_pieces(self):
    """{piece: id} of the pieces given as `user_defined_symbols` when the vocabulary was built
    (always whole pieces; parsing's tree tokens)."""
    from sentencepiece import sentencepiece_model_pb2  # pylint: disable=import-outside-toplevel
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(self.model_proto)
    user_defined = sentencepiece_model_pb2.ModelProto.SentencePiece.USER_DEFINED
    return {p.piece: i for i, p in enumerate(model.pieces) if p.type == user_defined}


class SymbolTokenizer(tf.Module):
  """In-graph tokenizer of the algorithmic problems: "3 7 2" <-> [3, 7, 2]."""

  def __init__(self, vocab_size, name=None):
    super().__init__(name=name)
    self.vocab_size = vocab_size

  def tokenize(self, texts):
    pieces = tf.strings.split(texts)                                 # [N, (len)] strings
    return tf.strings.to_number(pieces, out_type=tf.int32)

  def detokenize(self, ids):
    pieces = tf.strings.as_string(strip_after_eos(ids, self.vocab_size))
    return tf.strings.reduce_join(pieces, axis=-1, separator=" ")


class SymbolVocab:
  """The algorithmic problems' vocabulary: ids 0 PAD, 1 EOS, symbols 2..num_symbols+1 as text.

  Same interface as `SubwordVocab`; a symbol is written as its id in decimal.

  Example:
      >>> vocab = SymbolVocab(10)
      >>> vocab.encode("4 2 11"), vocab.decode([4, 2, 11, 1, 0])
      ([4, 2, 11], '4 2 11')
  """

  pad_id = PAD_ID
  eos_id = EOS_ID

  def __init__(self, num_symbols):
    self.num_symbols = num_symbols
    self.vocab_size = num_symbols + 2
    self.model_proto = SYMBOL_PROTO_PREFIX + json.dumps(num_symbols).encode() + b"}"
    self.tf_tokenizer = SymbolTokenizer(self.vocab_size)

  def tokenize(self, texts):
    return self.tf_tokenizer.tokenize(texts)

  def detokenize(self, ids):
    return self.tf_tokenizer.detokenize(ids)

  def encode(self, text):
    return [int(piece) for piece in text.split()]

  def decode(self, ids):
    return " ".join(str(i) for i in strip_ids(ids))

  def id_to_piece(self, ids):
    return [{PAD_ID: "<pad>", EOS_ID: "</s>"}.get(int(i), str(int(i))) for i in ids]


def vocab_from_proto(model_proto):
  """`SubwordVocab` or `SymbolVocab` from the `model_proto` bytes either one writes.

  Example:
      >>> vocab_from_proto(SymbolVocab(10).model_proto).vocab_size
      12
  """
  if model_proto.startswith(SYMBOL_PROTO_PREFIX):
    return SymbolVocab(json.loads(model_proto)["num_symbols"])
  return SubwordVocab(model_proto)


def reservoir_sample(lines, size, seed=DEFAULT_SEED):
  """A uniform sample of `size` lines from an iterable of any length, in first-seen order.

  Holds only `size` lines in memory (Algorithm R with a seeded generator: same input, same sample).

  Example:
      >>> reservoir_sample((str(i) for i in range(10**6)), 3)
      ['357073', '870264', '983095']
  """
  rng = random.Random(seed)
  reservoir = []  # (position, line)
  for position, line in enumerate(lines):
    if position < size:
      reservoir.append((position, line))
    else:
      slot = rng.randint(0, position)
      if slot < size:
        reservoir[slot] = (position, line)
  return [line for _, line in sorted(reservoir)]


def _train(sample_path, model_prefix, vocab_size, user_defined_symbols=()):
  spm.SentencePieceTrainer.train(
      user_defined_symbols=list(user_defined_symbols),
      input=sample_path, model_prefix=model_prefix, vocab_size=vocab_size, model_type="bpe",
      normalization_rule_name="identity", remove_extra_whitespaces=False, byte_fallback=True,
      pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1,
      input_sentence_size=0, shuffle_input_sentence=False, num_threads=1, minloglevel=2)


def build_subword_vocab(lines, model_path, vocab_size,
                        input_sentence_size=DEFAULT_INPUT_SENTENCE_SIZE, seed=DEFAULT_SEED,
                        user_defined_symbols=()):
  """Trains a BPE vocabulary on `lines` (an iterable of str) and writes it to `model_path`.

  At most `input_sentence_size` lines (a seeded reservoir sample) are kept. If the text is too
  small for `vocab_size`, the size is lowered to what sentencepiece allows, with a warning.
  Writes `model_path` (and sentencepiece's `.vocab` listing beside it) atomically.
  `user_defined_symbols` are always whole pieces (a leading "\u2581" makes the piece include
  the space before it: "\u2581(NP" is one piece of " (NP").

  Example:
      >>> vocab = build_subword_vocab(["a small corpus", ...], "vocab.my_problem.8000.model", 8000)
  """
  folder = os.path.dirname(os.path.abspath(model_path))
  os.makedirs(folder, exist_ok=True)
  sample = [line for line in reservoir_sample(lines, input_sentence_size, seed)
            if line.strip() and "\n" not in line]
  if not sample:
    raise ValueError(f"no text to build the vocabulary {model_path} from")
  with tempfile.TemporaryDirectory(dir=folder, prefix=".vocab_tmp") as tmp:
    sample_path = os.path.join(tmp, "sample.txt")
    with open(sample_path, "w", encoding="utf-8") as f:
      f.writelines(line + "\n" for line in sample)
    del sample
    spm.set_random_generator_seed(seed)
    prefix = os.path.join(tmp, "spm")
    try:
      _train(sample_path, prefix, vocab_size, user_defined_symbols)
    except RuntimeError as e:
      limit = re.search(r"Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+)",
                        str(e))
      if not limit:
        raise
      logger.warning("corpus too small for a vocabulary of %d; building %s with %s pieces instead",
                     vocab_size, model_path, limit.group(1))
      _train(sample_path, prefix, int(limit.group(1)), user_defined_symbols)
    os.replace(prefix + ".vocab", os.path.splitext(model_path)[0] + ".vocab")
    with open(prefix + ".model", "rb") as f:
      proto = _without_temporary_paths(f.read())
    with open(prefix + ".model", "wb") as f:
      f.write(proto)
    os.replace(prefix + ".model", model_path)
  return SubwordVocab.from_file(model_path)


def _without_temporary_paths(model_proto):
  """Clears the training file names sentencepiece stores, so equal inputs give equal files."""
  from sentencepiece import sentencepiece_model_pb2  # pylint: disable=import-outside-toplevel
  model = sentencepiece_model_pb2.ModelProto()
  model.ParseFromString(model_proto)
  del model.trainer_spec.input[:]
  model.trainer_spec.model_prefix = ""
  return model.SerializeToString()


def get_or_build_subword_vocab(model_path, lines_fn, vocab_size, corpus="",
                               input_sentence_size=DEFAULT_INPUT_SENTENCE_SIZE, seed=DEFAULT_SEED,
                               user_defined_symbols=()):
  """Loads `model_path` if present; otherwise builds it from `lines_fn()` and caches it.

  `corpus` describes the text it is built from; it is stored beside the model (`.json`) and a
  later load with a different description warns (one data_dir per corpus).
  """
  meta_path = os.path.splitext(model_path)[0] + ".json"
  if os.path.exists(model_path):
    vocab = SubwordVocab.from_file(model_path)
    if corpus and os.path.exists(meta_path):
      with open(meta_path, encoding="utf-8") as f:
        built_from = json.load(f).get("corpus", "")
      if built_from != corpus:
        logger.warning("%s was built from %r, now used for %r; use another data_dir per corpus",
                       model_path, built_from, corpus)
    return vocab
  logger.info("building vocabulary %s (%d pieces) from %s", model_path, vocab_size, corpus)
  vocab = build_subword_vocab(lines_fn(), model_path, vocab_size, input_sentence_size, seed,
                              user_defined_symbols)
  with open(meta_path, "w", encoding="utf-8") as f:
    json.dump({"corpus": corpus, "requested_vocab_size": vocab_size,
               "vocab_size": vocab.vocab_size, "seed": seed,
               "input_sentence_size": input_sentence_size,
               "sha256": hashlib.sha256(vocab.model_proto).hexdigest()}, f, indent=2)
  return vocab
