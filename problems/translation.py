"""Translation problems: WMT14 through TFDS, and any parallel corpus in local text files.

Every translation problem can read local files instead of its default source:

    get_problem("translate_ende", raw_data_dir="/data/wmt14_plain")
        # reads train.{en,de}, newstest2013.{en,de} (dev), newstest2014.{en,de} (test)
    get_problem("translate_ende", split_files={"train": [("a.en", "a.de"), ("b.en", "b.de")],
                                                "dev": [("dev.en", "dev.de")]})
        # explicit file pairs per split (relative to raw_data_dir when given)

The file names per split are the class attribute `raw_split_prefixes`: split -> prefix, the files
being `<prefix>.<source_language>` and `<prefix>.<target_language>`.
"""

import dataclasses
import gzip
import logging
import os
import urllib.request

import tensorflow as tf

from t2t_lite import registry
from t2t_lite.data import text_files, vocab as vocab_lib
from t2t_lite.problems.base import Problem, check_split

logger = logging.getLogger(__name__)


class TranslateProblem(Problem):
  """Text pairs from local parallel files, a shared SentencePiece vocabulary.

  Args:
    raw_data_dir: folder of `<prefix>.<lang>` files, prefixes from `raw_split_prefixes`.
    split_files: optional {split: [(source_path, target_path), ...]} overriding the file names.
  """

  approx_vocab_size = 8000
  vocab_split = "train"             # the split whose text (both sides) trains the vocabulary
  raw_split_prefixes = {"train": "train", "dev": "dev", "test": "test"}

  def __init__(self, raw_data_dir=None, split_files=None):
    super().__init__(raw_data_dir)
    self.split_files = {split: [tuple(pair) for pair in (
        [pairs] if isinstance(pairs, tuple) else pairs)] for split, pairs in (split_files or {}).items()}
    self._vocabs = {}

  # --- Local files. ------------------------------------------------------------------------------

  @property
  def reads_local_files(self):
    return self.raw_data_dir is not None or bool(self.split_files)

  def expected_layout(self):
    """Says which files this problem reads, for error messages."""
    if self.split_files:
      return "; ".join(f"{split}: " + ", ".join(f"{s} + {t}" for s, t in pairs)
                       for split, pairs in self.split_files.items())
    src, tgt = self.source_language, self.target_language
    folder = self.raw_data_dir or "<raw_data_dir>"
    return (f"{folder}/ holding, for {self.name}, " +
            ", ".join(f"{split}: {prefix}.{src} + {prefix}.{tgt}"
                      for split, prefix in self.raw_split_prefixes.items()) +
            " (plain UTF-8, one sentence a line, line N of one file translating line N of the "
            "other)")

  def file_pairs(self, split):
    """[(source_path, target_path), ...] of a split when reading local files."""
    check_split(split)
    if split in self.split_files:
      pairs = self.split_files[split]
    elif split in self.raw_split_prefixes and self.raw_data_dir is not None:
      prefix = self.raw_split_prefixes[split]
      pairs = [(f"{prefix}.{self.source_language}", f"{prefix}.{self.target_language}")]
    else:
      raise text_files.DataError(f"{self.name} has no local files for split {split!r}. "
                                 f"Expected layout: {self.expected_layout()}")
    folder = self.raw_data_dir or ""
    return [(os.path.join(folder, s), os.path.join(folder, t)) for s, t in pairs]

  # --- The Problem interface. --------------------------------------------------------------------

  def raw_files(self, split):
    if not self.reads_local_files:
      return []
    return [path for pair in self.file_pairs(split) for path in pair]

  def text_dataset(self, split, data_dir):
    check_split(split)
    if self.reads_local_files:
      return text_files.parallel_text_dataset(self.file_pairs(split), self.expected_layout())
    return self.default_text_dataset(split, data_dir)

  def text_pairs(self, split, data_dir):
    if self.reads_local_files:
      return [pair for s, t in self.file_pairs(split)
              for pair in text_files.read_parallel_files(s, t, self.expected_layout())]
    return super().text_pairs(split, data_dir)

  def default_text_dataset(self, split, data_dir):
    """The problem's own source when no local files are given."""
    raise text_files.DataError(f"{self.name} reads local files: pass raw_data_dir (or "
                               f"--raw_data_dir). Expected layout: {self.expected_layout()}")

  @property
  def vocab_filename(self):
    """T2T-like: `vocab.translate_ende.37000.model` (a `_rev` problem uses its base's)."""
    return f"vocab.{self.name}.{self.approx_vocab_size}.model"

  def vocab_corpus(self):
    """Describes the text the vocabulary is built from (stored beside it): local files by their
    absolute real paths, so that the same files reached from another working directory (or
    through a link) are the same corpus."""
    if self.reads_local_files:
      real = os.path.realpath
      return "local:" + ",".join(f"{real(s)}+{real(t)}" for s, t in self.file_pairs(self.vocab_split))
    return f"{self.name}:{self.vocab_split}"

  def vocab_lines(self, data_dir):
    """Streams the text of both sides of `vocab_split`: source 1, target 1, source 2, ..."""
    if self.reads_local_files:
      pairs = (pair for s, t in self.file_pairs(self.vocab_split)
               for pair in text_files.iter_parallel_files(s, t, self.expected_layout()))
    else:
      pairs = ((ex["inputs"].decode("utf-8"), ex["targets"].decode("utf-8"))
               for ex in self.default_text_dataset(self.vocab_split, data_dir).as_numpy_iterator())
    for source, target in pairs:
      yield source
      yield target

  def get_vocab(self, data_dir):
    path = os.path.join(data_dir, self.vocab_filename)
    if path not in self._vocabs:
      self._vocabs[path] = vocab_lib.get_or_build_subword_vocab(
          path, lambda: self.vocab_lines(data_dir), self.approx_vocab_size, self.vocab_corpus())
    return self._vocabs[path]


class TfdsTranslateProblem(TranslateProblem):
  """A translation problem whose default source is a TFDS dataset (the real download code).

  `download_and_prepare` runs once into `<data_dir>/tfds` (downloads in `<data_dir>/tfds/downloads`).
  TFDS fixes the order of examples when it prepares a split (a seeded shuffle), so `text_dataset`
  of these problems is in TFDS's order, the same on every run, not in the original file order.
  """

  tfds_name = ""                     # e.g. "wmt14_translate/de-en"
  tfds_splits = {"train": "train", "dev": "validation", "test": "test"}

  def tfds_data_dir(self, data_dir):
    return os.path.join(data_dir, "tfds")

  def tfds_download_dir(self, data_dir):
    return os.path.join(self.tfds_data_dir(data_dir), "downloads")

  def tfds_builder(self, data_dir):
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
    return tfds.builder(self.tfds_name, data_dir=self.tfds_data_dir(data_dir))

  def default_text_dataset(self, split, data_dir):
    builder = self.tfds_builder(data_dir)
    builder.download_and_prepare(download_dir=self.tfds_download_dir(data_dir))  # no-op once done
    examples = builder.as_dataset(split=self.tfds_splits[split], shuffle_files=False)
    source, target = self.source_language, self.target_language
    return examples.map(lambda ex: {"inputs": ex[source], "targets": ex[target]},
                        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


@registry.problems.register(aliases=("translate_ende_wmt32k",))
class TranslateEnde(TfdsTranslateProblem):
  """WMT14 English -> German (the paper's EN-DE): TFDS `wmt14_translate/de-en`.

  train: the WMT14 training corpora (about 4.5M pairs), dev: newstest2013, test: newstest2014.
  Shared BPE vocabulary of about 37000 pieces (paper section 5.1).
  With raw_data_dir: train.{en,de}, newstest2013.{en,de}, newstest2014.{en,de}.
  """
  source_language, target_language = "en", "de"
  approx_vocab_size = 37000
  tfds_name = "wmt14_translate/de-en"
  raw_split_prefixes = {"train": "train", "dev": "newstest2013", "test": "newstest2014"}


@registry.problems.register
class TranslateEndeWmt8k(TranslateEnde):
  """translate_ende (WMT14 through TFDS) with an 8000-piece shared vocabulary (T2T's 8k)."""
  approx_vocab_size = 8000


@registry.problems.register(aliases=("translate_enfr_wmt32k",))
class TranslateEnfr(TfdsTranslateProblem):
  """WMT14 English -> French: TFDS `wmt14_translate/fr-en`, 32000-piece shared vocabulary.

  train: the WMT14 EN-FR training corpora (about 40M pairs), dev: newstest2013, test:
  newstest2014 (the paper's EN-FR test set).
  With raw_data_dir: train.{en,fr}, newstest2013.{en,fr}, newstest2014.{en,fr}.
  """
  source_language, target_language = "en", "fr"
  approx_vocab_size = 32000
  tfds_name = "wmt14_translate/fr-en"
  raw_split_prefixes = {"train": "train", "dev": "newstest2013", "test": "newstest2014"}


@registry.problems.register
class TranslateEnfrWmt8k(TranslateEnfr):
  """translate_enfr (WMT14 through TFDS) with an 8000-piece shared vocabulary (T2T's 8k)."""
  approx_vocab_size = 8000


@registry.problems.register
class TranslateEnfrWmtSmall32k(TranslateEnfr):
  """WMT14 EN-FR's small variant: trains on WMT14's News Commentary v9 (about 180k pairs) only,
  through TFDS's WMT builder; dev newstest2013, test newstest2014; 32000-piece vocabulary.

  T2T's `_small` problems trained on OpenNMT's 1M-pair sample, a download outside TFDS; this is
  the small WMT14 corpus TFDS provides.
  """
  train_subsets = ("newscommentary_v9",)

  def tfds_builder(self, data_dir):
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
    from tensorflow_datasets.translate import wmt  # pylint: disable=import-outside-toplevel
    config = wmt.WmtConfig(
        name="_".join(self.train_subsets), language_pair=("fr", "en"),
        version="1.0.0", description="WMT14 fr-en trained on " + ", ".join(self.train_subsets),
        subsets={tfds.Split.TRAIN: list(self.train_subsets),
                 tfds.Split.VALIDATION: ["newstest2013"], tfds.Split.TEST: ["newstest2014"]})
    return wmt.WmtTranslate(config=config, data_dir=self.tfds_data_dir(data_dir))


@registry.problems.register
class TranslateEnfrWmtSmall8k(TranslateEnfrWmtSmall32k):
  """translate_enfr_wmt_small32k with an 8000-piece vocabulary (T2T's 8k)."""
  approx_vocab_size = 8000


@registry.problems.register
class TranslateEndeMulti30k(TranslateProblem):
  """Multi30k task 1 English -> German (image captions; 29,000 / 1,014 / 1,000 pairs).

  Local files only: raw_data_dir holds train.{en,de}, val.{en,de} (dev),
  test_2016_flickr.{en,de} (test). Shared BPE vocabulary of 8000 pieces.
  """
  source_language, target_language = "en", "de"
  approx_vocab_size = 8000
  raw_split_prefixes = {"train": "train", "dev": "val", "test": "test_2016_flickr"}
  # The dataset's public files (github.com/multi30k/dataset, data/task1/raw), gzipped.
  download_url = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"

  def default_decode_hparams(self):
    """T2T's beam 4 with alpha 1.2 instead of 0.6: the Multi30k recipe's decoding, tuned on val
    (docs/training.md; alpha 1.0 gained 0.2-0.3 over 0.6 on each of five trainings, 1.2 another
    0.24 on the recipe's set), so that the decoder, an export and the server decode a Multi30k
    model the way its recipe scored it."""
    return dataclasses.replace(super().default_decode_hparams(), alpha=1.2)

  def download(self, data_dir):
    """Fetches the public files into `DATA_DIR/multi30k` once (atomically); returns the folder."""
    if data_dir is None:
      raise text_files.DataError(
          f"{self.name} reads local files: pass raw_data_dir (or --raw_data_dir), or a data_dir to "
          f"download the public files into. Expected layout: {self.expected_layout()}")
    folder = os.path.join(data_dir, "multi30k")
    os.makedirs(folder, exist_ok=True)
    for prefix in self.raw_split_prefixes.values():
      for lang in (self.source_language, self.target_language):
        path = os.path.join(folder, f"{prefix}.{lang}")
        if os.path.exists(path):
          continue
        url = f"{self.download_url}{prefix}.{lang}.gz"
        logger.info("downloading %s", url)
        try:
          with urllib.request.urlopen(url, timeout=120) as response:
            text = gzip.decompress(response.read())
        except (OSError, EOFError) as e:
          raise text_files.DataError(
              f"could not download {url} ({e}). Without internet, put the files into {folder} "
              f"yourself or pass --raw_data_dir. Expected layout: {self.expected_layout()}") from e
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
          f.write(text)
        os.replace(tmp, path)
    return folder

  def default_text_dataset(self, split, data_dir):
    """Without raw_data_dir: the public files, downloaded into data_dir on first use."""
    local = type(self)(raw_data_dir=self.download(data_dir))
    return local.text_dataset(split, data_dir)


@registry.problems.register
class TranslateEndeMulti30k4k(TranslateEndeMulti30k):
  """translate_ende_multi30k with a 4000-piece shared vocabulary, for small models: at d 128 the
  output projection over 8,000 pieces is about half of a training step's products, and smaller
  subword vocabularies tend to suit a 29k-pair corpus (Sennrich and Zhang, 2019)."""
  approx_vocab_size = 4000


@registry.problems.register
class TranslateEndeMulti30k16k(TranslateEndeMulti30k):
  """translate_ende_multi30k with a 16,000-piece shared vocabulary: the other side of the 4k
  variant (which lost about 1 BLEU on val against 8k at d 128, docs/training.md): closer to whole
  words for the corpus's ~19k German and ~10k English types, at twice the output projection."""
  approx_vocab_size = 16000

