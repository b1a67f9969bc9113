"""t2t-lite-parse-eval: labeled bracket P/R/F1 (EVALB, COLLINS.prm) of decoded linearized trees.

    t2t-lite-parse-eval --gold_dir=../shared/data/ptb_sample --split=dev --write_inputs=dev.words
    t2t-lite-decoder --output_dir=runs/parsing --decode_from_file=dev.words --decode_to_file=dev.out
    t2t-lite-parse-eval --gold_dir=../shared/data/ptb_sample --split=dev --decoded=dev.out

--decoded holds one linearized tree per line, in the order of the split's sentences (what
t2t-lite-decoder writes for the --write_inputs file; with return_beams the first beam counts).
Malformed trees are repaired and given the input words (t2t_lite.parsing.linearize); the
repairs are counted, and so are the trees with one leaf per word as decoded. Punctuation is
recognised by the gold tags (t2t_lite.parsing.evalb). To cross-check with the real EVALB:

    t2t-lite-parse-eval ... --decoded=dev.out --write_trees=dev.tst --write_gold=dev.gld
    evalb -p COLLINS.prm dev.gld dev.tst
"""

import sys

from t2t_lite.bin import common
from t2t_lite.parsing import evalb, treebank, trees


def build_parser():
  p = common.parser(__doc__)
  p.add_argument("--gold_dir", required=True,
                 help="the treebank folder (the problem's --raw_data_dir): .mrg files")
  p.add_argument("--split", default="dev", choices=treebank.SPLITS,
                 help="the split whose gold trees score the decoded ones")
  p.add_argument("--decoded", default=None, help="decoded linearized trees, one per line")
  p.add_argument("--write_inputs", default=None,
                 help="write the split's sentences (the decoder's input), one per line")
  p.add_argument("--write_trees", default=None,
                 help="with --decoded: write the decoded trees with the gold part-of-speech tags "
                      "restored, in PTB format, one per line (for the real EVALB)")
  p.add_argument("--write_gold", default=None,
                 help="write the split's cleaned gold trees in PTB format, one per line (EVALB's "
                      "gold file for --write_trees)")
  common.add_bool(p, "require_well_formed",
                  "exit with status 1 if any decoded tree needed repair (a constrained decode "
                  "never should)")
  return p


def main(argv=None):
  p = build_parser()
  args = p.parse_args(argv)
  if not (args.decoded or args.write_inputs or args.write_gold):
    p.error("give --decoded (to score), --write_inputs (the decoder's input) or --write_gold")
  try:
    gold = treebank.read_split(args.gold_dir, args.split)
    if args.write_inputs:
      _write(args.write_inputs, (" ".join(tree.leaves()) for tree in gold))
      print(f"wrote {len(gold)} {args.split} sentences to {args.write_inputs}", file=sys.stderr)
    if args.write_gold:
      _write(args.write_gold, (str(tree) for tree in gold))
    if args.decoded:
      with open(args.decoded, encoding="utf-8") as f:
        lines = f.read().splitlines()
      result = evalb.evaluate_linearized(lines, gold)
      print(result)
      if args.write_trees:
        _write(args.write_trees, (str(tree) for tree in result.trees))
      if args.require_well_formed and result.repaired:
        print(f"error: {result.repaired} decoded trees needed repair; a constrained decode "
              "should give none", file=sys.stderr)
        return 1
  except (OSError, ValueError, trees.TreeFormatError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  return 0


def _write(path, lines):
  with open(path, "w", encoding="utf-8") as f:
    f.writelines(line + "\n" for line in lines)


if __name__ == "__main__":
  sys.exit(main())
