"""The real TFDS WMT code path, offline: newstest2013/2014 flow through `wmt_translate`'s builder.

No internet here, so the download cache is filled by hand the way TFDS itself leaves it: the
archive's cache name from `get_dl_fname(url, registered sha256)`, a `<name>.INFO` file beside it
(TFDS then does not re-hash the archive) and the extracted folder `extracted/TAR_GZ.<name>/dev/`
holding the newstest files (linked from /work/shared/data/wmt14). A `wmt_translate` config with only
the newstest2013 (validation) and newstest2014 (test, SGML) subsets then runs TFDS's real
`download_and_prepare` and `_generate_examples`; the problem reads the result exactly as
`translate_ende` reads `wmt14_translate/de-en`.
"""

import json
import os

import pytest

from t2t_lite.data import pipeline
from t2t_lite.hparams import HParams
from t2t_lite.problems import get_problem
from t2t_lite.problems.translation import TranslateEnde

tfds = pytest.importorskip("tensorflow_datasets")
from tensorflow_datasets.core.download import resource  # noqa: E402
from tensorflow_datasets.translate import wmt  # noqa: E402


DEV_URL = "http://data.statmt.org/wmt19/translation-task/dev.tgz"
NEWSTEST_FILES = ("newstest2013.en", "newstest2013.de", "newstest2014-deen-src.de.sgm",
                  "newstest2014-deen-ref.en.sgm", "newstest2014-deen-src.en.sgm",
                  "newstest2014-deen-ref.de.sgm")


def registered_url_info(url):
  """(size, sha256, filename) TFDS registers for `url` in the wmt14_translate checksums."""
  builder_class = tfds.builder_cls("wmt14_translate")
  info = builder_class.url_infos[url]
  return info.size, info.checksum, info.filename


def fill_download_cache(download_dir, wmt14_dir):
  size, checksum, filename = registered_url_info(DEV_URL)
  name = resource.get_dl_fname(DEV_URL, checksum)
  os.makedirs(download_dir, exist_ok=True)
  open(os.path.join(download_dir, name), "wb").close()   # never read: the INFO file vouches for it
  with open(os.path.join(download_dir, name + ".INFO"), "w", encoding="utf-8") as f:
    json.dump({"urls": [DEV_URL], "dataset_names": ["wmt14_translate"], "original_fname": filename,
               "url_info": {"size": size, "checksum": checksum, "filename": filename}}, f)
  extracted = os.path.join(download_dir, "extracted", f"TAR_GZ.{name}", "dev")
  os.makedirs(extracted, exist_ok=True)
  for file_name in NEWSTEST_FILES:
    os.symlink(os.path.join(wmt14_dir, file_name), os.path.join(extracted, file_name))


class NewstestOnlyEnde(TranslateEnde):
  """translate_ende with TFDS's builder restricted to the subsets that are available offline."""

  vocab_split = "dev"
  approx_vocab_size = 2000

  def tfds_builder(self, data_dir):
    config = wmt.WmtConfig(language_pair=("de", "en"), version="1.0.0", name="newstest_only",
                           subsets={tfds.Split.VALIDATION: ["newstest2013"],
                                    tfds.Split.TEST: ["newstest2014"]})
    return wmt.WmtTranslate(config=config, data_dir=self.tfds_data_dir(data_dir))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, shared_data):
  tfds.disable_progress_bar()
  data_dir = str(tmp_path_factory.mktemp("tfds_offline"))
  problem = NewstestOnlyEnde()
  fill_download_cache(problem.tfds_download_dir(data_dir), str(shared_data / "wmt14"))
  return problem, data_dir


def plain_pairs(wmt14_dir, year):
  english = (wmt14_dir / f"newstest{year}.en").read_text(encoding="utf-8").split("\n")[:-1]
  german = (wmt14_dir / f"newstest{year}.de").read_text(encoding="utf-8").split("\n")[:-1]
  return list(zip(english, german))


def collapse_spaces(pairs):
  return sorted((" ".join(s.split()), " ".join(t.split())) for s, t in pairs)


def test_real_builder_yields_the_newstest_text(prepared, shared_data):
  problem, data_dir = prepared
  assert get_problem("translate_ende").tfds_name == "wmt14_translate/de-en"
  for split, year in (("test", 2014), ("dev", 2013)):
    pairs = problem.text_pairs(split, data_dir)
    expected = plain_pairs(shared_data / "wmt14", year)
    # TFDS fixes its own example order when it prepares a split; the text must be the same.
    # newstest2014 comes from the SGML release, where 4 English segments have a double space that
    # the plain files collapse; everything else is identical byte for byte.
    assert len(pairs) == len(expected)
    assert len(set(pairs) - set(expected)) <= (4 if year == 2014 else 0)
    assert collapse_spaces(pairs) == collapse_spaces(expected)
  assert os.path.isdir(os.path.join(data_dir, "tfds", "wmt_translate"))


def test_problem_dataset_over_tfds_batches_all_of_newstest2014(prepared, shared_data):
  problem, data_dir = prepared
  vocab = problem.get_vocab(data_dir)                     # built from TFDS's dev split text
  assert os.path.exists(os.path.join(data_dir, "vocab.newstest_only_ende.2000.model"))
  batches = list(problem.dataset("test", data_dir, HParams(batch_size=4096, max_length=256),
                                 training=False))
  decoded = [(s.decode("utf-8"), t.decode("utf-8")) for b in batches
             for s, t in zip(vocab.detokenize(b["inputs"]).numpy(),
                             vocab.detokenize(b["targets"]).numpy())]
  # English in, German out, each pair together: as text_pairs and as the plain newstest2014 files.
  assert sorted(decoded) == sorted(problem.text_pairs("test", data_dir))
  assert collapse_spaces(decoded) == collapse_spaces(plain_pairs(shared_data / "wmt14", 2014))
  assert len(decoded) == 3003
  print(f"newstest2014 via TFDS: padding {pipeline.padding_fraction(batches)['budget']:.3f}")
  # The reversed problem reads the same TFDS data the other way round.
  rev = get_problem("translate_ende_rev")
  assert (rev.source_language, rev.target_language) == ("de", "en")
