"""Which `.mrg` files make up train / dev / test of the WSJ Penn Treebank, and reading them.

Two layouts of `raw_data_dir` are understood:

- the full treebank (LDC99T42, `parsed/mrg/wsj`): section folders `00` ... `24` holding
  `wsj_NNNN.mrg`, either in `raw_data_dir` itself or in `raw_data_dir/parsed/mrg/wsj` or
  `raw_data_dir/wsj`. The standard split: sections 02-21 train, 22 dev, 23 test. A flat folder
  holding files of sections 22 and 23 (the full treebank without its section folders) is split
  the same way, by the section number NN of `wsj_NNNN.mrg`.
- any other flat folder, like the NLTK 10% sample (`../shared/data/ptb_sample`, wsj_0001 ...
  wsj_0179, 3,669 trees): wsj_0001-0159 train (3,396 trees), wsj_0160 and after dev (273 trees)
  and test = dev (the sample has no separate test set; its dev score is the only one).

Trees are cleaned (`trees.clean_tree`) and kept in file order, then tree order within a file.
"""

import os
import re

from t2t_lite.parsing import trees as trees_lib

SECTION_SPLITS = {"train": range(2, 22), "dev": (22,), "test": (23,)}
SAMPLE_LAST_TRAIN_FILE = 159            # wsj_0001-0159 train, wsj_0160-... dev (= test)
_FILE = re.compile(r"^wsj_(\d\d)(\d\d)\.mrg$", re.IGNORECASE)
_SECTION = re.compile(r"^\d\d$")
SPLITS = ("train", "dev", "test")

EXPECTED_LAYOUT = (
    "a folder of Penn Treebank .mrg files: either the WSJ section folders 00..24 with "
    "wsj_NNNN.mrg (itself, or its parsed/mrg/wsj or wsj subfolder; train 02-21, dev 22, test 23) "
    "or a flat folder of wsj_NNNN.mrg files such as the NLTK sample (train wsj_0001-0159, "
    "dev = test from wsj_0160 on)")


class TreebankError(ValueError):
  """A missing or empty treebank folder; the message says what was expected."""


def _section_root(raw_data_dir):
  """The folder holding the NN section folders, or None for a flat folder."""
  for folder in (raw_data_dir, os.path.join(raw_data_dir, "parsed", "mrg", "wsj"),
                 os.path.join(raw_data_dir, "wsj")):
    if os.path.isdir(folder) and any(_SECTION.match(name) and
                                     os.path.isdir(os.path.join(folder, name))
                                     for name in os.listdir(folder)):
      return folder
  return None


def _mrg_files(folder):
  return sorted(name for name in os.listdir(folder) if _FILE.match(name))


def layout(raw_data_dir):
  """{"train": [path, ...], "dev": [...], "test": [...]} of a treebank folder.

  Raises:
    TreebankError: the folder does not exist or holds no `wsj_NNNN.mrg` file.
  """
  if not raw_data_dir or not os.path.isdir(raw_data_dir):
    raise TreebankError(f"treebank folder {raw_data_dir!r} does not exist; expected "
                        f"{EXPECTED_LAYOUT}")
  root = _section_root(raw_data_dir)
  if root is not None:
    files = [(int(section), os.path.join(root, section, name))
             for section in sorted(os.listdir(root)) if _SECTION.match(section)
             and os.path.isdir(os.path.join(root, section))
             for name in _mrg_files(os.path.join(root, section))]
  else:
    files = [(int(_FILE.match(name).group(1)), os.path.join(raw_data_dir, name))
             for name in _mrg_files(raw_data_dir)]
  if not files:
    raise TreebankError(f"no wsj_NNNN.mrg file in {raw_data_dir}; expected {EXPECTED_LAYOUT}")
  sections = {section for section, _ in files}
  if root is not None or sections & {22, 23}:
    return {split: [path for section, path in files if section in SECTION_SPLITS[split]]
            for split in SPLITS}
  number = lambda path: int(os.path.basename(path)[4:8])  # noqa: E731
  train = [path for _, path in files if number(path) <= SAMPLE_LAST_TRAIN_FILE]
  dev = [path for _, path in files if number(path) > SAMPLE_LAST_TRAIN_FILE]
  return {"train": train, "dev": dev, "test": dev}


def read_split(raw_data_dir, split):
  """The cleaned trees of a split, in file order (see the module docstring for the split).

  Raises:
    TreebankError: no such folder, no `.mrg` file in it, or none in this split.
    trees.TreeFormatError: a malformed file (the message names it, with line and column).
  """
  if split not in SPLITS:
    raise ValueError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
  paths = layout(raw_data_dir)[split]
  if not paths:
    raise TreebankError(f"{raw_data_dir} has no .mrg file of the {split} split; expected "
                        f"{EXPECTED_LAYOUT}")
  out = []
  for path in paths:
    for tree in trees_lib.read_mrg_file(path):
      cleaned = trees_lib.clean_tree(tree)
      if cleaned is not None:
        out.append(cleaned)
  return out
