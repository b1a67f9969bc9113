"""Problems: registry names, `_rev`, local files (and their bad input), usr_dir, algorithmic."""

import logging
import os

import pytest

from t2t_lite import registry
from t2t_lite.data.text_files import DataError
from t2t_lite.hparams import DecodeHParams, HParams
from t2t_lite.problems import get_problem, import_usr_dir


HP = HParams(batch_size=1024, max_length=64)


def write_pair(folder, prefix, source_lines, target_lines, source="en", target="de"):
  folder.mkdir(parents=True, exist_ok=True)
  for lang, lines in ((source, source_lines), (target, target_lines)):
    data = lines if isinstance(lines, bytes) else "".join(f"{line}\n" for line in lines).encode()
    (folder / f"{prefix}.{lang}").write_bytes(data)


def test_registered_names_and_alias():
  names = registry.problems.names()
  for name in ("translate_ende", "translate_enfr", "translate_ende_multi30k",
               "algorithmic_reverse", "algorithmic_copy"):
    assert name in names
  problem = get_problem("translate_ende_wmt32k")
  assert problem.name == "translate_ende"
  assert (problem.source_language, problem.target_language) == ("en", "de")
  assert problem.vocab_filename == "vocab.translate_ende.37000.model"
  assert get_problem("translate_enfr").vocab_filename == "vocab.translate_enfr.32000.model"
  assert isinstance(problem.default_decode_hparams(), DecodeHParams)


def test_unknown_name_lists_problems_and_closest_match():
  with pytest.raises(registry.RegistryError) as error:
    get_problem("translate_endee")
  assert "Did you mean 'translate_ende'" in str(error.value)
  assert "algorithmic_reverse" in str(error.value)
  with pytest.raises(registry.RegistryError, match="_rev"):
    get_problem("no_such_problem_rev")


def test_rev_swaps_any_translation_problem(multi30k_folder):
  forward = get_problem("translate_ende_multi30k", raw_data_dir=str(multi30k_folder))
  reverse = get_problem("translate_ende_multi30k_rev", raw_data_dir=str(multi30k_folder))
  assert reverse.name == "translate_ende_multi30k_rev"
  assert (reverse.source_language, reverse.target_language) == ("de", "en")
  assert reverse.text_pairs("dev", None)[:5] == [(t, s) for s, t in forward.text_pairs("dev", None)[:5]]
  first = next(iter(reverse.text_dataset("dev", None)))
  assert first["inputs"].numpy().decode() == forward.text_pairs("dev", None)[0][1]
  for name in ("translate_ende_rev", "translate_ende_wmt32k_rev", "translate_enfr_rev"):
    problem = get_problem(name)
    assert problem.target_language == "en" and problem.base.name in ("translate_ende",
                                                                     "translate_enfr")


def test_multi30k_reads_local_files_in_file_order(multi30k_folder):
  problem = get_problem("translate_ende_multi30k", raw_data_dir=str(multi30k_folder))
  folder = multi30k_folder
  for split, prefix, count in (("dev", "val", 1014), ("test", "test_2016_flickr", 1000)):
    english = (folder / f"{prefix}.en").read_text(encoding="utf-8").split("\n")[:-1]
    german = (folder / f"{prefix}.de").read_text(encoding="utf-8").split("\n")[:-1]
    assert problem.text_pairs(split, None) == list(zip(english, german))
    assert len(english) == count
  from_graph = [ex["targets"].decode() for ex in problem.text_dataset("dev", None).as_numpy_iterator()]
  assert from_graph == german_of(folder / "val.de")


def german_of(path):
  return path.read_text(encoding="utf-8").split("\n")[:-1]


def test_any_translation_problem_reads_local_files(shared_data, tmp_path):
  # translate_ende with raw_data_dir: newstest2013 is dev, newstest2014 is test.
  problem = get_problem("translate_ende", raw_data_dir=str(shared_data / "wmt14"))
  test_pairs = problem.text_pairs("test", None)
  assert len(test_pairs) == 3003 and test_pairs[0][1] == german_of(shared_data / "wmt14" /
                                                                   "newstest2014.de")[0]
  assert len(problem.text_pairs("dev", None)) == 3000
  # Explicit file pairs per split, several files concatenated.
  write_pair(tmp_path, "a", ["one", "two"], ["eins", "zwei"])
  write_pair(tmp_path, "b", ["three"], ["drei"])
  explicit = get_problem("translate_ende", raw_data_dir=str(tmp_path),
                         split_files={"train": [("a.en", "a.de"), ("b.en", "b.de")]})
  assert explicit.text_pairs("train", None) == [("one", "eins"), ("two", "zwei"), ("three", "drei")]
  assert len(list(explicit.text_dataset("train", None))) == 3


def test_missing_file_names_the_path_and_the_layout(tmp_path):
  problem = get_problem("translate_ende_multi30k", raw_data_dir=str(tmp_path))
  with pytest.raises(DataError) as error:
    problem.text_dataset("train", None)
  message = str(error.value)
  assert str(tmp_path / "train.en") in message
  assert "Expected layout" in message and "val.en + val.de" in message
  assert "test_2016_flickr.en" in message
  (tmp_path / "val.en").mkdir()                       # not a readable file either
  with pytest.raises(DataError, match="val.en"):
    problem.text_pairs("dev", None)
  with pytest.raises(DataError, match="pass raw_data_dir"):
    get_problem("translate_ende_multi30k").text_dataset("dev", None)


def test_different_line_counts_give_both_counts(tmp_path):
  write_pair(tmp_path, "train", ["a", "b", "c"], ["x", "y"])
  problem = get_problem("translate_ende_multi30k", raw_data_dir=str(tmp_path))
  with pytest.raises(DataError) as error:
    problem.text_dataset("train", None)
  assert "has 3 lines" in str(error.value) and "has 2 lines" in str(error.value)
  assert str(tmp_path / "train.de") in str(error.value)


def test_empty_lines_are_skipped_and_counted(tmp_path, caplog):
  write_pair(tmp_path, "train", ["a", "", "c", "d", "  "], ["x", "y", "", "w", "v"])
  problem = get_problem("translate_ende_multi30k", raw_data_dir=str(tmp_path))
  with caplog.at_level(logging.WARNING):
    pairs = problem.text_pairs("train", None)
    in_graph = list(problem.text_dataset("train", None).as_numpy_iterator())
  assert pairs == [("a", "x"), ("d", "w")]
  assert [(ex["inputs"], ex["targets"]) for ex in in_graph] == [(b"a", b"x"), (b"d", b"w")]
  assert "skipping 3 of 5 pairs with an empty side" in caplog.text


def test_invalid_utf8_names_file_and_line(tmp_path):
  write_pair(tmp_path, "train", b"fine\nalso fine\nbad \xe4 latin1\n", ["x", "y", "z"])
  problem = get_problem("translate_ende_multi30k", raw_data_dir=str(tmp_path))
  with pytest.raises(DataError) as error:
    problem.text_dataset("train", None)
  assert f"{tmp_path / 'train.en'}, line 3: invalid UTF-8" in str(error.value)


def test_windows_line_ends_match_tf_data(tmp_path):
  write_pair(tmp_path, "train", b"one\r\ntwo\r\n", b"eins\r\nzwei")
  problem = get_problem("translate_ende_multi30k", raw_data_dir=str(tmp_path))
  expected = [("one", "eins"), ("two", "zwei")]
  assert problem.text_pairs("train", None) == expected
  assert [(ex["inputs"].decode(), ex["targets"].decode())
          for ex in problem.text_dataset("train", None).as_numpy_iterator()] == expected


def test_usr_dir_registers_a_users_problem(tmp_path, multi30k_folder):
  package = tmp_path / "my_t2t_usr"
  package.mkdir()
  (package / "__init__.py").write_text(
      "from t2t_lite import registry\n"
      "from t2t_lite.problems import TranslateProblem\n\n"
      "@registry.problems.register\n"
      "class TranslateEndeUsrTest(TranslateProblem):\n"
      "  approx_vocab_size = 500\n"
      "  raw_split_prefixes = {'train': 'val', 'dev': 'val', 'test': 'test_2016_flickr'}\n")
  import_usr_dir(str(package))
  import_usr_dir(str(package) + "/")                  # twice is harmless
  problem = get_problem("translate_ende_usr_test", raw_data_dir=str(multi30k_folder))
  assert problem.name == "translate_ende_usr_test"
  batch = next(iter(problem.dataset("dev", str(tmp_path / "data"), HP, training=False)))
  assert batch["inputs"].shape[0] > 0
  assert os.path.exists(tmp_path / "data" / "vocab.translate_ende_usr_test.500.model")
  assert get_problem("translate_ende_usr_test_rev").source_language == "de"
  # A single .py file works too.
  single = tmp_path / "one_problem.py"
  single.write_text("from t2t_lite import registry\n"
                    "from t2t_lite.problems.algorithmic import AlgorithmicProblem\n\n"
                    "@registry.problems.register\n"
                    "class AlgorithmicSortUsrTest(AlgorithmicProblem):\n"
                    "  def target_symbols(self, symbols):\n"
                    "    return sorted(symbols)\n")
  import_usr_dir(str(single))
  source, target = get_problem("algorithmic_sort_usr_test").text_pairs("dev")[0]
  assert sorted(map(int, source.split())) == list(map(int, target.split()))
  with pytest.raises(FileNotFoundError, match="does not exist"):
    import_usr_dir(str(tmp_path / "missing"))


@pytest.mark.parametrize("name", ["algorithmic_reverse", "algorithmic_copy"])
def test_algorithmic_problems_are_deterministic_and_correct(name):
  problem = get_problem(name)
  pairs = problem.text_pairs("train")
  assert pairs == get_problem(name).text_pairs("train") and len(pairs) == 10_000
  assert pairs[:50] != problem.text_pairs("dev")[:50]
  for source, target in pairs[:500]:
    symbols = [int(s) for s in source.split()]
    assert 1 <= len(symbols) <= problem.max_length and all(2 <= s <= 11 for s in symbols)
    expected = symbols[::-1] if name == "algorithmic_reverse" else symbols
    assert [int(s) for s in target.split()] == expected
  vocab = problem.get_vocab(None)
  assert vocab.vocab_size == 12
  batch = next(iter(problem.dataset("train", None, HP, training=True)))
  decoded = vocab.detokenize(batch["inputs"]).numpy()
  assert all(d.decode() in {s for s, _ in pairs} for d in decoded[:20])
  assert problem.default_decode_hparams().beam_size == 1


def test_multi30k_downloads_the_public_files_when_no_local_folder_is_given(multi30k_folder, tmp_path):
  """The real download code, served from file:// URLs holding gzipped slices of the corpus."""
  import gzip
  server = tmp_path / "server"
  server.mkdir()
  for prefix in ("train", "val", "test_2016_flickr"):
    for lang in ("en", "de"):
      lines = (multi30k_folder / f"{prefix}.{lang}").read_bytes().split(b"\n")[:50]
      (server / f"{prefix}.{lang}.gz").write_bytes(gzip.compress(b"\n".join(lines) + b"\n"))
  problem = get_problem("translate_ende_multi30k")
  problem.download_url = server.as_uri() + "/"
  data_dir = tmp_path / "data"
  pairs = problem.text_pairs("dev", str(data_dir))
  expected = list(zip(*((multi30k_folder / f"val.{lang}").read_text(encoding="utf-8")
                        .split("\n")[:50] for lang in ("en", "de"))))
  assert pairs == expected
  assert sorted(os.listdir(data_dir / "multi30k")) == sorted(
      f"{p}.{l}" for p in ("train", "val", "test_2016_flickr") for l in ("en", "de"))
  for gz in server.iterdir():  # downloaded once: later runs read the local copies
    gz.unlink()
  assert problem.text_pairs("test", str(data_dir))[0][0]
  offline = get_problem("translate_ende_multi30k")
  offline.download_url = (tmp_path / "nowhere").as_uri() + "/"
  with pytest.raises(DataError, match="could not download .*Expected layout"):
    offline.text_pairs("dev", str(tmp_path / "other"))


def test_vocab_corpus_names_the_files_not_the_path_typed(tmp_path, monkeypatch):
  """The vocabulary's stored corpus (a later load with another warns) is the same for the same
  files reached by a relative path, an absolute one or a link, and differs for other files."""
  for folder in (tmp_path / "a", tmp_path / "b"):
    write_pair(folder, "train", ["a house"], ["ein Haus"])
  (tmp_path / "link").symlink_to(tmp_path / "a")
  monkeypatch.chdir(tmp_path)
  corpus = lambda folder: get_problem("translate_ende_multi30k", raw_data_dir=folder).vocab_corpus()  # noqa: E731
  assert corpus("a") == corpus(str(tmp_path / "a")) == corpus("link") == corpus("./b/../a")
  assert corpus("a") != corpus("b")
  assert corpus("a").startswith("local:" + str((tmp_path / "a").resolve()))
