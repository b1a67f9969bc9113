"""Local parallel text files: validated in Python, then read by tf.data.

A local corpus is a pair of plain UTF-8 files, one sentence a line, line N of the source file aligned
with line N of the target file (the layout of /work/shared/data and of most MT releases):

    multi30k/train.en   multi30k/train.de

Reading it is cheap next to training, so every file is checked in Python before TensorFlow sees it;
bad input fails here with a message naming the file, never deep inside a tf.data iterator:

- a missing or unreadable file -> `DataError` naming the path and the expected layout;
- files with different line counts -> `DataError` giving both counts;
- invalid UTF-8 -> `DataError` with file, line number and the offending bytes;
- an empty line on either side (after stripping ASCII whitespace) -> the pair is skipped and the
  number skipped is logged as a warning.

Lines are split exactly as `tf.data.TextLineDataset` splits them: on "\\n", with one trailing "\\r"
removed, and a last line without a newline still counts.
"""

import functools
import logging
import os

import tensorflow as tf

logger = logging.getLogger(__name__)

# tf.strings.strip removes ASCII whitespace only; Python must agree on what an "empty" line is.
ASCII_WHITESPACE = " \t\n\v\f\r"


class DataError(ValueError):
  """Bad input data; the message names the file and says what was expected."""


def _lines(path):
  """Yields (line_number, text) of a UTF-8 file, split like TextLineDataset."""
  with open(path, "rb") as f:
    for number, raw in enumerate(f, start=1):
      if raw.endswith(b"\n"):
        raw = raw[:-1]
      if raw.endswith(b"\r"):
        raw = raw[:-1]
      try:
        yield number, raw.decode("utf-8")
      except UnicodeDecodeError as e:
        bad = raw[max(0, e.start - 10):e.end + 10]
        raise DataError(f"{path}, line {number}: invalid UTF-8 at byte {e.start} ({e.reason}) "
                        f"near {bad!r}. Files must be UTF-8; convert it first, e.g. "
                        f"`iconv -f latin1 -t utf-8`.") from None


def _check_readable(path, layout):
  if not os.path.isfile(path):
    raise DataError(f"missing data file {path}. Expected layout: {layout}")
  if not os.access(path, os.R_OK):
    raise DataError(f"cannot read data file {path} (permissions). Expected layout: {layout}")


def _is_empty(text):
  return not text.strip(ASCII_WHITESPACE)


@functools.lru_cache(maxsize=64)
def _validate_cached(source_path, target_path, layout, _source_stamp, _target_stamp):
  source_count = target_count = skipped = 0
  source_lines, target_lines = _lines(source_path), _lines(target_path)
  while True:
    source = next(source_lines, None)
    target = next(target_lines, None)
    if source is None or target is None:
      break
    source_count, target_count = source_count + 1, target_count + 1
    skipped += _is_empty(source[1]) or _is_empty(target[1])
  # Count whatever is left of the longer file (still decoding it: a UTF-8 error is reported first).
  source_count += sum(1 for _ in source_lines) + (source is not None)
  target_count += sum(1 for _ in target_lines) + (target is not None)
  if source_count != target_count:
    raise DataError(f"parallel files differ in length: {source_path} has {source_count} lines, "
                    f"{target_path} has {target_count} lines. Line N of one must translate line N "
                    f"of the other. Expected layout: {layout}")
  return source_count, skipped


def validate_parallel_files(source_path, target_path, layout="one sentence a line, UTF-8"):
  """Checks a file pair; returns (lines, skipped_empty_pairs) and warns about skipped pairs.

  The result is cached per (path, size, mtime), so re-reading the same corpus is free.

  Example:
      >>> validate_parallel_files("multi30k/val.en", "multi30k/val.de")
      (1014, 0)
  """
  for path in (source_path, target_path):
    _check_readable(path, layout)
  stamps = [(os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in (source_path, target_path)]
  try:
    lines, skipped = _validate_cached(source_path, target_path, layout, *stamps)
  except OSError as e:
    raise DataError(f"cannot read {e.filename or source_path}: {e.strerror}. "
                    f"Expected layout: {layout}") from None
  if skipped:
    logger.warning("skipping %d of %d pairs with an empty side in %s / %s", skipped, lines,
                   source_path, target_path)
  return lines, skipped


def iter_parallel_files(source_path, target_path, layout="one sentence a line, UTF-8"):
  """Yields (source, target) string pairs, empty pairs skipped, in file order (streams the files).

  Example:
      >>> next(iter_parallel_files("val.en", "val.de"))
      ('A group of men are loading cotton onto a truck', 'Eine Gruppe von Männern lädt ...')
  """
  validate_parallel_files(source_path, target_path, layout)
  for (_, source), (_, target) in zip(_lines(source_path), _lines(target_path)):
    if not (_is_empty(source) or _is_empty(target)):
      yield source, target


def read_parallel_files(source_path, target_path, layout="one sentence a line, UTF-8"):
  """`iter_parallel_files` as a list (for small sets: dev, test)."""
  return list(iter_parallel_files(source_path, target_path, layout))


def parallel_text_dataset(file_pairs, layout="one sentence a line, UTF-8"):
  """tf.data of {"inputs": tf.string, "targets": tf.string} from [(source_path, target_path), ...].

  Every pair is validated first (see module docstring); the files are then streamed by
  TextLineDataset, so a corpus larger than memory is fine. Order: file pair by file pair, line by
  line; pairs with an empty side are dropped.

  Example:
      >>> ds = parallel_text_dataset([("val.en", "val.de")])
      >>> next(iter(ds))["inputs"].numpy()
      b'A group of men are loading cotton onto a truck'
  """
  datasets, skipped = [], 0
  for source_path, target_path in file_pairs:
    skipped += validate_parallel_files(source_path, target_path, layout)[1]
    datasets.append(tf.data.Dataset.zip({
        "inputs": tf.data.TextLineDataset(source_path),
        "targets": tf.data.TextLineDataset(target_path),
    }))
  if not datasets:
    raise DataError(f"no files given. Expected layout: {layout}")
  dataset = functools.reduce(lambda a, b: a.concatenate(b), datasets)
  if not skipped:
    return dataset  # the filter below costs a per-pair call: only pay it when there is something
  return dataset.filter(lambda ex: tf.logical_and(tf.strings.strip(ex["inputs"]) != "",
                                                  tf.strings.strip(ex["targets"]) != ""))
