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

Imported Marian (OPUS-MT) models come with one SentencePiece model per language and one id space
shared by both (`PairedSubwordVocab`): sources are split by the source model, targets by the
target model, and both sides' pieces are looked up in the shared vocabulary, in the graph too.
Every vocabulary has `tokenize` / `encode` (sources), `tokenize_targets` / `encode_targets`
and `detokenize` / `decode` (targets).

Training is deterministic: the text is sampled with a seeded reservoir (so a 4.5M-pair corpus is
never held in memory, only `input_sentence_size` lines), written in a fixed order, and trained
with sentencepiece's own sampling and shuffling off and one thread.
"""

import base64
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
PAIRED_PROTO_PREFIX = b'{"type": "paired_sentencepiece", '


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

  tokenize_targets = tokenize  # one model for both languages

  def sampling(self, alpha):
    """The same model segmenting by sampling, for training data (hparams subword_sampling_alpha):
    each call draws a segmentation per sentence (with a BPE model, BPE-dropout: each merge
    skipped with probability `alpha`; with a unigram one, a segmentation drawn from the lattice
    smoothed by `alpha`). An object with `tokenize` and `tokenize_targets` like this vocab's."""
    sampler = tf_text.SentencepieceTokenizer(model=self.model_proto, out_type=tf.int32,
                                             nbest_size=-1, alpha=alpha)
    return _Sampling(sampler.tokenize)

  def detokenize(self, ids):
    """int ids [N, L] (dense or ragged) -> tf.string [N]; stops at the first EOS, drops PAD."""
    return self.tf_tokenizer.detokenize(strip_after_eos(ids, self.vocab_size))

  def encode(self, text):
    return self._processor.encode(text)

  encode_targets = encode

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


class _Sampling:
  """`tokenize` / `tokenize_targets` of a vocabulary's sampling segmentation (`sampling`): one
  model for both languages, as SubwordVocab's."""

  def __init__(self, tokenize):
    self.tokenize = self.tokenize_targets = tokenize


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

  tokenize_targets = tokenize

  def detokenize(self, ids):
    return self.tf_tokenizer.detokenize(ids)

  def encode(self, text):
    return [int(piece) for piece in text.split()]

  encode_targets = encode

  def decode(self, ids):
    return " ".join(str(i) for i in strip_ids(ids))

  def id_to_piece(self, ids):
    return [{PAD_ID: "<pad>", EOS_ID: "</s>"}.get(int(i), str(int(i))) for i in ids]


LANGUAGE_CODE = r"(?s)^>>.*?<<"  # a leading target-language token, `>>deu<<` (Marian's multilingual models)


def split_language_code(text):
  """(`>>xx<<` or "", the rest): Hugging Face's MarianTokenizer splits off a leading language code
  before SentencePiece and looks it up whole.

  Example:
      >>> split_language_code(">>fra<< Hello"), split_language_code("Hello")
      ((">>fra<<", " Hello"), ("", "Hello"))
  """
  end = text.find("<<") if text.startswith(">>") else -1
  return (text[:end + 2], text[end + 2:]) if end >= 0 else ("", text)


class PairedTokenizer(tf.Module):
  """In-graph side of `PairedSubwordVocab`: SentencePiece splits text into pieces (the source
  model for sources, the target model for targets), a hash table maps pieces to shared ids
  (UNK for a piece outside the vocabulary), and a SentencePiece model whose pieces are the
  shared vocabulary in id order turns output ids back into text. Saved with a SavedModel."""

  def __init__(self, source_model, target_model, shared_target_model, pieces, name=None):
    super().__init__(name=name)
    # Distinct names: tensorflow-text's model resources are shared by node name, so in a loaded
    # SavedModel two tokenizers of the same name would both get one of the models.
    self.source = tf_text.SentencepieceTokenizer(model=source_model, out_type=tf.string,
                                                 name="source_sentencepiece")
    self.target = tf_text.SentencepieceTokenizer(model=target_model, out_type=tf.string,
                                                 name="target_sentencepiece")
    self.shared_target = tf_text.SentencepieceTokenizer(
        model=shared_target_model, out_type=tf.int32, name="shared_target_sentencepiece")
    self.vocab_size = len(pieces)
    self.ids = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(pieces), tf.range(len(pieces), dtype=tf.int32)),
        default_value=UNK_ID)

  def _tokenize(self, sentencepiece, texts):
    texts = tf.convert_to_tensor(texts, tf.string)                                   # [N]
    rest = tf.strings.regex_replace(texts, LANGUAGE_CODE, "", replace_global=False)
    code_length = tf.strings.length(texts) - tf.strings.length(rest)                 # 0: no code
    has_code = code_length > 0
    codes = tf.strings.substr(texts, tf.zeros_like(code_length), code_length)        # [N]
    pieces = sentencepiece.tokenize(rest)                                            # [N, (len)]
    ids = tf.ragged.map_flat_values(self.ids.lookup, pieces)
    code_ids = tf.RaggedTensor.from_row_lengths(
        self.ids.lookup(tf.boolean_mask(codes, has_code)), tf.cast(has_code, tf.int64))  # [N, (0|1)]
    return tf.concat([code_ids, ids], axis=1)

  def tokenize(self, texts):
    """Sources: tf.string [N] -> shared ids, int32 ragged [N, (len)], no EOS."""
    return self._tokenize(self.source, texts)

  def tokenize_targets(self, texts):
    return self._tokenize(self.target, texts)

  def detokenize(self, ids):
    """Shared ids [N, (len)] (PAD and everything from EOS on removed) -> tf.string [N]."""
    return tf.strings.strip(self.shared_target.detokenize(ids))


class PairedSubwordVocab:
  """A source and a target SentencePiece model over one shared vocabulary (Marian's OPUS-MT models).

  Encoding follows Hugging Face's MarianTokenizer: a leading `>>xx<<` language code is one token;
  the rest is split into pieces by the source model (targets: the target model), and each piece is
  looked up in the shared vocabulary (UNK if absent). Decoding joins the target-side pieces of the
  ids, as `decode_pieces` does, and strips the ends; UNK decodes to nothing (as
  `skip_special_tokens=True`). The same in the graph (`tf_tokenizer`, `PairedTokenizer`).

  Args:
    source_model, target_model: the two serialized SentencePiece models (`source.spm`,
      `target.spm`).
    pieces: the shared vocabulary in t2t_lite id order; pieces[PAD_ID], pieces[EOS_ID] and
      pieces[UNK_ID] are its pad, end-of-sentence and unknown pieces (`<pad>`, `</s>`, `<unk>`).

  Example:
      >>> vocab = PairedSubwordVocab(source_spm, target_spm, ["<pad>", "</s>", "<unk>", ...])
      >>> vocab.encode("Hello world"), vocab.decode([57, 1134, 1])
  """

  pad_id = PAD_ID
  eos_id = EOS_ID

  def __init__(self, source_model: bytes, target_model: bytes, pieces: list[str]):
    self.source_model, self.target_model = bytes(source_model), bytes(target_model)
    self.pieces = list(pieces)
    self.vocab_size = len(self.pieces)
    self.index = {piece: i for i, piece in enumerate(self.pieces)}
    if len(self.index) != self.vocab_size:
      raise ValueError("the shared vocabulary lists a piece twice; every piece needs one id")
    self._source = spm.SentencePieceProcessor(model_proto=self.source_model)
    self._target = spm.SentencePieceProcessor(model_proto=self.target_model)
    shared_target = _over_shared_ids(self.target_model, self.pieces)
    self._decoder = spm.SentencePieceProcessor(model_proto=shared_target)
    self.tf_tokenizer = PairedTokenizer(self.source_model, self.target_model, shared_target,
                                        self.pieces)
    self.model_proto = json.dumps({  # starts with PAIRED_PROTO_PREFIX
        "type": "paired_sentencepiece", "pieces": self.pieces,
        "source_model": base64.b64encode(self.source_model).decode("ascii"),
        "target_model": base64.b64encode(self.target_model).decode("ascii")}).encode()

  @classmethod
  def from_proto(cls, model_proto: bytes) -> "PairedSubwordVocab":
    record = json.loads(model_proto)
    return cls(base64.b64decode(record["source_model"]), base64.b64decode(record["target_model"]),
               record["pieces"])

  def _encode(self, processor, text):
    code, rest = split_language_code(text)
    pieces = ([code] if code else []) + processor.encode(rest, out_type=str)
    return [self.index.get(piece, UNK_ID) for piece in pieces]

  def encode(self, text):
    return self._encode(self._source, text)

  def encode_targets(self, text):
    return self._encode(self._target, text)

  def decode(self, ids):
    return self._decoder.decode(strip_ids(ids)).strip()

  def tokenize(self, texts):
    return self.tf_tokenizer.tokenize(texts)

  def tokenize_targets(self, texts):
    return self.tf_tokenizer.tokenize_targets(texts)

  def detokenize(self, ids):
    return self.tf_tokenizer.detokenize(strip_after_eos(ids, self.vocab_size))

  def id_to_piece(self, ids):
    return [self.pieces[int(i)] for i in ids]


def _over_shared_ids(target_model, pieces):
  """The target SentencePiece model with the shared vocabulary as its pieces, in id order: its
  decoder turns shared ids into text (pieces of the source language included)."""
  from sentencepiece import sentencepiece_model_pb2  # pylint: disable=import-outside-toplevel
  proto = sentencepiece_model_pb2.ModelProto()
  proto.ParseFromString(target_model)
  kind = sentencepiece_model_pb2.ModelProto.SentencePiece.Type
  types = {piece.piece: piece.type for piece in proto.pieces}
  special = {PAD_ID: kind.CONTROL, EOS_ID: kind.CONTROL, UNK_ID: kind.UNKNOWN}
  del proto.pieces[:]
  for i, piece in enumerate(pieces):
    kept = types.get(piece, kind.NORMAL)
    proto.pieces.add(piece=piece, score=0.0, type=special.get(
        i, kept if kept in (kind.NORMAL, kind.USER_DEFINED, kind.BYTE) else kind.NORMAL))
  spec = proto.trainer_spec
  spec.unk_id, spec.eos_id, spec.pad_id, spec.bos_id = UNK_ID, EOS_ID, PAD_ID, -1
  spec.unk_piece, spec.eos_piece, spec.pad_piece = pieces[UNK_ID], pieces[EOS_ID], pieces[PAD_ID]
  spec.unk_surface = ""
  spec.byte_fallback = spec.byte_fallback and all(f"<0x{b:02X}>" in types for b in range(256))
  return proto.SerializeToString()


def vocab_from_proto(model_proto):
  """`SubwordVocab`, `SymbolVocab` or `PairedSubwordVocab` from the `model_proto` bytes it writes.

  Example:
      >>> vocab_from_proto(SymbolVocab(10).model_proto).vocab_size
      12
  """
  if model_proto.startswith(SYMBOL_PROTO_PREFIX):
    return SymbolVocab(json.loads(model_proto)["num_symbols"])
  if model_proto.startswith(PAIRED_PROTO_PREFIX):
    return PairedSubwordVocab.from_proto(model_proto)
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
