"""t2t-lite-parse-eval: labeled bracket P/R/F1 (EVALB, COLLINS.prm) of decoded linearized trees.

    t2t-lite-parse-eval --gold_dir=../shared/data/ptb_sample --split=dev --write_inputs=dev.words
    t2t-lite-decoder --output_dir=runs/parsing --decode_from_file=dev.words --decode_to_file=dev.out
    t2t-lite-parse-eval --gold_dir=../shared/data/ptb_sample --split=dev --decoded=dev.out

--decoded holds one linearized tree per line, in the order of the split's sentences (what
t2t-lite-decoder writes for the --write_inputs file; with return_beams the first beam counts).
Malformed trees are repaired and given the input words (t2t_lite.parsing.linearize); the
repairs are counted. Punctuation is recognised by the gold tags (t2t_lite.parsing.evalb).
"""

import argparse
import sys

from t2t_lite.parsing import evalb, treebank, trees


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--gold_dir", required=True,
                 help="the treebank folder (the problem's --raw_data_dir): .mrg files")
  p.add_argument("--split", default="dev", choices=treebank.SPLITS)
  p.add_argument("--decoded", default=None, help="decoded linearized trees, one per line")
  p.add_argument("--write_inputs", default=None,
                 help="write the split's sentences (the decoder's input), one per line")
  args = p.parse_args(argv)
  if not args.decoded and not args.write_inputs:
    p.error("give --decoded (to score) and/or --write_inputs (to write the decoder's input)")
  try:
    gold = treebank.read_split(args.gold_dir, args.split)
    if args.write_inputs:
      with open(args.write_inputs, "w", encoding="utf-8") as f:
        f.writelines(" ".join(tree.leaves()) + "\n" for tree in gold)
      print(f"wrote {len(gold)} {args.split} sentences to {args.write_inputs}", file=sys.stderr)
    if args.decoded:
      with open(args.decoded, encoding="utf-8") as f:
        lines = f.read().splitlines()
      print(evalb.evaluate_linearized(lines, gold))
  except (OSError, ValueError, trees.TreeFormatError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
