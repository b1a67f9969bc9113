"""The shared subword vocabulary: exact round trip, T2T ids, determinism, caching, SavedModel."""

import hashlib
import json
import logging
import os

import pytest
import tensorflow as tf

from t2t_lite.data import vocab as vocab_lib
from t2t_lite.problems import get_problem


def multi30k_data_dir(tmp_path_factory, shared_data):
  """A data_dir shared by the test modules: the Multi30k vocabulary (8000) is built once."""
  data_dir = tmp_path_factory.getbasetemp() / "t2t_data_multi30k"
  problem = get_problem("translate_ende_multi30k", raw_data_dir=str(shared_data / "multi30k"))
  problem.get_vocab(str(data_dir))
  return problem, str(data_dir)


@pytest.fixture(scope="session")
def vocab(tmp_path_factory, shared_data):
  problem, data_dir = multi30k_data_dir(tmp_path_factory, shared_data)
  return problem.get_vocab(data_dir)


def read_lines(path):
  with open(path, encoding="utf-8") as f:
    return f.read().split("\n")[:-1]


@pytest.mark.parametrize("language", ["en", "de"])
def test_every_newstest2014_line_round_trips_exactly(vocab, shared_data, language):
  lines = read_lines(shared_data / "wmt14" / f"newstest2014.{language}")
  assert len(lines) == 3003
  back = [s.decode("utf-8") for s in vocab.detokenize(vocab.tokenize(tf.constant(lines))).numpy()]
  mismatches = [(a, b) for a, b in zip(lines, back) if a != b]
  assert not mismatches, mismatches[:3]
  assert all(vocab.decode(vocab.encode(line)) == line for line in lines)


def test_whitespace_and_unseen_characters_survive(vocab):
  # Identity normalization, no whitespace clean-up, byte fallback for characters never seen.
  lines = ["  two  spaces ", "tab\there", "emoji 🦜 and 中文", "", "x", "a\u00a0b\u3000c  "]
  assert [vocab.decode(vocab.encode(line)) for line in lines] == lines
  # In-graph, the one documented normalization: spaces at the start of a line are dropped.
  back = vocab.detokenize(vocab.tokenize(tf.constant(lines))).numpy()
  assert [b.decode("utf-8") for b in back] == [line.lstrip(" ") for line in lines]


def test_t2t_ids_and_interface(vocab):
  assert (vocab.pad_id, vocab.eos_id) == (0, 1)
  assert vocab.id_to_piece([0, 1, 2]) == ["<pad>", "</s>", "<unk>"]
  assert 2000 <= vocab.vocab_size <= 8000
  ids = vocab.tokenize(tf.constant(["A man in a blue shirt."]))
  assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
  row = ids[0].numpy().tolist()
  assert 1 not in row and 0 not in row                      # no EOS, no PAD
  assert row == vocab.encode("A man in a blue shirt.")
  # detokenize stops at the first EOS and drops PAD; dense and ragged give the same.
  dense = tf.constant([row + [1] + row + [0], row + [0, 0] + [0] * len(row)])
  assert vocab.detokenize(dense).numpy().tolist() == [b"A man in a blue shirt."] * 2
  ragged = tf.ragged.constant([row + [1, 5], row])
  assert vocab.detokenize(ragged).numpy().tolist() == [b"A man in a blue shirt."] * 2
  # Ids outside the vocabulary (a model's output layer wider than it) are dropped, not decoded.
  outside = tf.constant([row[:2] + [vocab.vocab_size, -3] + row[2:] + [vocab.vocab_size + 7]])
  assert vocab.detokenize(outside).numpy().tolist() == [b"A man in a blue shirt."]
  assert vocab.decode(row + [1, 7, 7]) == "A man in a blue shirt."


def test_vocab_is_cached_and_reused(vocab, tmp_path_factory, shared_data):
  _, data_dir = multi30k_data_dir(tmp_path_factory, shared_data)
  files = sorted(os.listdir(data_dir))
  assert "vocab.translate_ende_multi30k.8000.model" in files
  assert "vocab.translate_ende_multi30k.8000.json" in files
  path = os.path.join(data_dir, "vocab.translate_ende_multi30k.8000.model")

  def fail():
    raise AssertionError("the cached vocabulary must not be rebuilt")

  reused = vocab_lib.get_or_build_subword_vocab(path, fail, 8000)
  assert reused.model_proto == vocab.model_proto
  # The reversed problem shares the forward problem's file.
  rev = get_problem("translate_ende_multi30k_rev", raw_data_dir=str(shared_data / "multi30k"))
  assert rev.get_vocab(data_dir).model_proto == vocab.model_proto


def test_building_twice_gives_identical_files(tmp_path, shared_data):
  lines = read_lines(shared_data / "europarl_sample" / "train.en")[:3000]
  lines += read_lines(shared_data / "europarl_sample" / "train.de")[:3000]
  # input_sentence_size below the corpus size: the seeded reservoir sample is used.
  first = vocab_lib.build_subword_vocab(iter(lines), str(tmp_path / "a.model"), 1000,
                                        input_sentence_size=4000)
  vocab_lib.build_subword_vocab(iter(lines), str(tmp_path / "b.model"), 1000,
                                input_sentence_size=4000)
  assert first.vocab_size == 1000
  assert (tmp_path / "a.model").read_bytes() == (tmp_path / "b.model").read_bytes()
  assert (tmp_path / "a.vocab").read_bytes() == (tmp_path / "b.vocab").read_bytes()


def test_reservoir_sample_is_seeded_uniform_and_bounded():
  sample = vocab_lib.reservoir_sample((str(i) for i in range(100_000)), 1000, seed=7)
  assert len(sample) == 1000
  assert sample == vocab_lib.reservoir_sample((str(i) for i in range(100_000)), 1000, seed=7)
  assert sample != vocab_lib.reservoir_sample((str(i) for i in range(100_000)), 1000, seed=8)
  values = [int(s) for s in sample]
  assert values == sorted(values)                             # first-seen order kept
  assert 40_000 < sum(values) / len(values) < 60_000          # roughly uniform over the stream
  assert vocab_lib.reservoir_sample(["a", "b"], 10) == ["a", "b"]


def test_vocab_size_shrinks_on_a_small_corpus(tmp_path, caplog):
  lines = ["the cat sat on the mat", "der Hund lief über die Wiese"] * 5
  with caplog.at_level(logging.WARNING):
    small = vocab_lib.build_subword_vocab(lines, str(tmp_path / "v.model"), 8000)
  assert 256 < small.vocab_size < 8000
  assert "corpus too small for a vocabulary of 8000" in caplog.text
  assert small.decode(small.encode("the cat über")) == "the cat über"


def corpus_warnings(caplog):
  return [r.getMessage() for r in caplog.records if "was built from" in r.getMessage()]


def test_a_vocab_built_from_one_corpus_warns_when_loaded_for_another(tmp_path, caplog):
  """The `.json` beside the model records the corpus; a load with another corpus warns, naming
  both and what to do, and keeps the file; a load with the same corpus is quiet."""
  path = str(tmp_path / "vocab.tiny.300.model")
  lines = ["the cat sat on the mat", "der Hund lief über die Wiese"] * 5

  def fail():
    raise AssertionError("the cached vocabulary must not be rebuilt")

  with caplog.at_level(logging.WARNING):
    built = vocab_lib.get_or_build_subword_vocab(path, lambda: iter(lines), 300, corpus="corpus-A")
  assert not corpus_warnings(caplog)
  with open(tmp_path / "vocab.tiny.300.json", encoding="utf-8") as f:
    meta = json.load(f)
  assert meta["corpus"] == "corpus-A" and meta["requested_vocab_size"] == 300
  assert meta["vocab_size"] == built.vocab_size
  assert meta["sha256"] == hashlib.sha256(built.model_proto).hexdigest()
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    other = vocab_lib.get_or_build_subword_vocab(path, fail, 300, corpus="corpus-B")
  assert other.model_proto == built.model_proto
  warnings = corpus_warnings(caplog)
  assert len(warnings) == 1, caplog.text
  message = warnings[0]
  assert message.startswith(path)
  assert "was built from 'corpus-A', now used for 'corpus-B'" in message
  assert "use another data_dir per corpus" in message
  with open(tmp_path / "vocab.tiny.300.json", encoding="utf-8") as f:
    assert json.load(f) == meta                         # the record still names the first corpus
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    vocab_lib.get_or_build_subword_vocab(path, fail, 300, corpus="corpus-A")
  assert not corpus_warnings(caplog)


def test_a_problems_vocab_records_its_raw_files_and_warns_for_other_files(tmp_path, caplog):
  """Through the problem's own path (get_vocab): the recorded corpus names the real train files,
  and the same data_dir used with another raw_data_dir warns, naming both sets of files."""
  for folder, english in ((tmp_path / "a", "a house"), (tmp_path / "b", "a garden")):
    folder.mkdir()
    (folder / "train.en").write_text(f"{english}\nthe cat sat on the mat\n" * 3, encoding="utf-8")
    (folder / "train.de").write_text("ein Haus\ndie Katze saß auf der Matte\n" * 3, encoding="utf-8")
  (tmp_path / "link").symlink_to(tmp_path / "a")
  data_dir = str(tmp_path / "data")

  def files(folder):
    real = os.path.realpath
    return f"local:{real(folder / 'train.en')}+{real(folder / 'train.de')}"

  def get_vocab(folder):
    caplog.clear()
    with caplog.at_level(logging.WARNING):
      vocab = get_problem("translate_ende_multi30k", raw_data_dir=str(folder)).get_vocab(data_dir)
    return vocab, corpus_warnings(caplog)

  built, warnings = get_vocab(tmp_path / "a")
  assert not warnings
  with open(os.path.join(data_dir, "vocab.translate_ende_multi30k.8000.json"), encoding="utf-8") as f:
    assert json.load(f)["corpus"] == files(tmp_path / "a")
  other, warnings = get_vocab(tmp_path / "b")
  assert other.model_proto == built.model_proto
  assert len(warnings) == 1, caplog.text
  assert f"was built from {files(tmp_path / 'a')!r}, now used for {files(tmp_path / 'b')!r}" in warnings[0]
  _, warnings = get_vocab(tmp_path / "link")             # the same files through a link
  assert not warnings


def test_tokenizer_lives_inside_a_saved_model(vocab, tmp_path):
  class Tokenize(tf.Module):

    def __init__(self, vocab):
      super().__init__()
      self.tokenizer = vocab.tf_tokenizer

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(self, texts):
      return self.tokenizer.detokenize(self.tokenizer.tokenize(texts))

  tf.saved_model.save(Tokenize(vocab), str(tmp_path / "saved"))
  loaded = tf.saved_model.load(str(tmp_path / "saved"))
  assert loaded.round_trip(tf.constant(["Zwei Männer über 🦜"])).numpy().tolist() == [
      "Zwei Männer über 🦜".encode()]


def test_symbol_vocab_has_the_same_interface():
  vocab = vocab_lib.SymbolVocab(10)
  assert vocab.vocab_size == 12 and (vocab.pad_id, vocab.eos_id) == (0, 1)
  assert vocab.encode("4 2 11") == [4, 2, 11]
  assert vocab.decode([4, 2, 11, 1, 3, 0]) == "4 2 11"
  assert vocab.id_to_piece([0, 1, 5]) == ["<pad>", "</s>", "5"]
  ids = vocab.tokenize(tf.constant(["4 2 11", "3"]))
  assert ids.to_list() == [[4, 2, 11], [3]]
  assert vocab.detokenize(tf.constant([[4, 2, 1, 9], [3, 0, 0, 0]])).numpy().tolist() == [
      b"4 2", b"3"]
  assert vocab.detokenize(tf.constant([[4, 12, 2, -1, 1]])).numpy().tolist() == [b"4 2"]
  assert vocab_lib.vocab_from_proto(vocab.model_proto).vocab_size == 12
