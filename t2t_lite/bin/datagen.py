r"""t2t-lite-datagen: build the vocabulary and tokenized shards of a problem once (T2T's t2t-datagen).

    t2t-lite-datagen --problem=translate_ende_multi30k --data_dir=t2t_data \
        --tmp_dir=/tmp/t2t_datagen --raw_data_dir=../shared/data/multi30k

Thin: parses flags and calls `t2t_lite.data.token_shards.generate_data`.
"""

import json
import logging
import sys

from t2t_lite.bin import common


def build_parser():
  p = common.parser(__doc__)
  p.prog = "t2t-lite-datagen"
  p.add_argument("--problem", required=True, help="registered problem name, e.g. translate_ende")
  p.add_argument("--data_dir", required=True, help="where the vocabulary and shards go")
  p.add_argument("--raw_data_dir", default=None,
                 help="read local parallel text files from this folder instead of TFDS")
  common.add_tmp_dir_flag(p)
  common.add_usr_dir_flag(p)
  p.add_argument("--splits", default="train,dev,test", help="comma-separated splits to write")
  p.add_argument("--train_shards", type=int, default=8, help="TFRecord files for train")
  return p


def parse_args(argv=None):
  return common.parse_args(build_parser(), argv)


def main(argv=None):
  args = parse_args(argv)
  logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
  # Imported after parsing so --help is instant.
  from t2t_lite.data.token_shards import generate_data  # pylint: disable=import-outside-toplevel
  from t2t_lite.data.text_files import DataError  # pylint: disable=import-outside-toplevel
  from t2t_lite.problems.base import check_split  # pylint: disable=import-outside-toplevel
  with common.usage_errors():
    common.load_usr_dir(args)
    problem = common.get_problem(args)
    splits = tuple(split.strip() for split in args.splits.split(",") if split.strip())
    if not splits:
      raise common.UsageError("--splits names no split; give some of train,dev,test")
    for split in splits:
      check_split(split)
    common.check_paths(dirs=[("--data_dir", args.data_dir)])
    if args.train_shards < 1:
      raise common.UsageError(f"--train_shards must be >= 1, got {args.train_shards}")
  try:
    manifest = generate_data(problem, args.data_dir, splits=splits, train_shards=args.train_shards)
  except DataError as e:  # missing, unreadable or mismatched raw files: the message says which
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(json.dumps(manifest, indent=2))
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
