"""The shared subword vocabulary: exact round trip, T2T ids, determinism, caching, SavedModel."""

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
