"""t2t-lite-bleu: score a detokenized translation against a reference, both BLEU figures.

    t2t-lite-bleu --translation=newstest2014.out.de --reference=newstest2014.de

Prints sacreBLEU with its signature (today's standard) and the paper's tokenized BLEU (Moses
tokenizer, compound splitting, multi-bleu; T2T's get_ende_bleu.sh). Never score subword ids.
"""

import argparse
import sys

from t2t_lite.decoding import bleu_score


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--translation", required=True, help="detokenized output, one sentence per line")
  p.add_argument("--reference", required=True, help="detokenized reference, same line count")
  p.add_argument("--lang", default="de", help="target language for the Moses tokenizer")
  args = p.parse_args(argv)
  try:
    print(bleu_score.bleu_files(args.translation, args.reference, args.lang))
  except (FileNotFoundError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
