"""t2t-lite-datagen: build the vocabulary and tokenized shards of a problem once.

    t2t-lite-datagen --problem=translate_ende_multi30k --data_dir=t2t_data \
        --raw_data_dir=../shared/data/multi30k

Thin: parses flags and calls `t2t_lite.data.token_shards.generate_data`.
"""

import argparse
import json
import logging


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog="t2t-lite-datagen", description=__doc__.split("\n")[1])
  parser.add_argument("--problem", required=True, help="registered problem name, e.g. translate_ende")
  parser.add_argument("--data_dir", required=True, help="where the vocabulary and shards go")
  parser.add_argument("--raw_data_dir", default=None,
                      help="read local parallel text files from this folder instead of TFDS")
  parser.add_argument("--t2t_usr_dir", default=None, help="a module that registers more problems")
  parser.add_argument("--splits", default="train,dev,test", help="comma-separated splits to write")
  parser.add_argument("--train_shards", type=int, default=8, help="TFRecord files for train")
  return parser.parse_args(argv)


def main(argv=None):
  args = parse_args(argv)
  logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
  # Imported after parsing so --help is instant.
  from t2t_lite.data.token_shards import generate_data  # pylint: disable=import-outside-toplevel
  from t2t_lite.problems import get_problem, import_usr_dir  # pylint: disable=import-outside-toplevel
  if args.t2t_usr_dir:
    import_usr_dir(args.t2t_usr_dir)
  problem = get_problem(args.problem, raw_data_dir=args.raw_data_dir)
  manifest = generate_data(problem, args.data_dir, splits=tuple(args.splits.split(",")),
                           train_shards=args.train_shards)
  print(json.dumps(manifest, indent=2))
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
