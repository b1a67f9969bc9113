"""Prints the F1 of the right-branching baseline (t2t_lite.parsing.baseline) on a treebank split.

    python scripts/parsing_baseline.py                       # ../shared/data/ptb_sample, dev
    python scripts/parsing_baseline.py --gold_dir=~/ptb/wsj --split=test

Scored like the model's output (t2t_lite.parsing.evalb: EVALB's COLLINS.prm conventions); no
model, no training data, pure Python, about a second.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from t2t_lite.parsing import baseline, evalb, treebank  # noqa: E402


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--gold_dir", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                    "shared", "data", "ptb_sample"))
  p.add_argument("--split", default="dev", choices=treebank.SPLITS)
  args = p.parse_args(argv)
  gold = treebank.read_split(os.path.expanduser(args.gold_dir), args.split)
  results = {}
  for labeling in baseline.LABELINGS:
    result = evalb.evaluate(gold, [baseline.right_branching(t.pos(), labeling) for t in gold])
    results[labeling] = result.f1
    print(f"right-branching, labels {labeling!r}, {args.split} ({len(gold)} trees):")
    print(f"  all sentences:  {result.all}")
    print(f"  <= 40 words:    {result.short}")
  return results


if __name__ == "__main__":
  main()
