"""t2t-lite-bleu: score a detokenized translation against a reference (T2T's t2t-bleu).

    t2t-lite-bleu --translation=newstest2014.out.de --reference=newstest2014.de

Prints sacreBLEU with its signature (today's standard), the paper's tokenized BLEU (Moses
tokenizer, compound splitting, multi-bleu; T2T's get_ende_bleu.sh), and T2T's own t2t-bleu
lines, BLEU_uncased and BLEU_cased (international tokenization: sacreBLEU's --tokenize intl,
with -lc for uncased), so figures compare with T2T papers and logs. Never score subword ids.
"""

import sys

from t2t_lite.bin import common
from t2t_lite.decoding import bleu_score


def build_parser():
  p = common.parser(__doc__)
  p.add_argument("--translation", required=True, help="detokenized output, one sentence per line")
  p.add_argument("--reference", required=True, help="detokenized reference, same line count")
  p.add_argument("--lang", default="de", help="target language for the Moses tokenizer")
  p.add_argument("--bleu_variant", default="both", choices=["both", "cased", "uncased", "none"],
                 help="T2T's: which of BLEU_cased / BLEU_uncased to print")
  return p


def main(argv=None):
  args = common.parse_args(build_parser(), argv)
  with common.usage_errors():
    common.check_paths(files=[("--translation", args.translation), ("--reference", args.reference)])
  try:
    print(bleu_score.bleu_files(args.translation, args.reference, args.lang, args.bleu_variant))
  except (FileNotFoundError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
