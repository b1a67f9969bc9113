r"""Minimum Bayes risk selection over the decoder's n-best lists (Kumar & Byrne, 2004).

Each source's n-best (`t2t-lite-decoder --decode_hparams=...,return_beams=true,
write_beam_scores=true`: `text<TAB>score<TAB>text<TAB>score...` per line) is reduced to the
candidate with the highest expected utility against the others, each weighted by
exp((score - best score) / temperature) (temperature 0: every candidate weighs the same):

    python scripts/mbr_select.py val.nbest.tsv --utility=chrf --temperature=0.5 > val.mbr.de

`--refs REF` prints corpus sacreBLEU of the selection, of the first beam and of the oracle (the
candidate with the best sentence BLEU against the reference), to stderr; `--sweep` with `--refs`
prints one line per setting (utility x temperature x beams), the table docs/training.md quotes.
"""

import argparse
import math
import sys

import sacrebleu

TEMPERATURES = (0.0, 0.5, 1.0, 2.0)


def read_nbest(path: str) -> list[list[tuple[str, float]]]:
  """Each line's (text, score) candidates, best first as the decoder wrote them."""
  rows = []
  with open(path, encoding="utf-8") as f:
    for number, line in enumerate(f, 1):
      parts = line.rstrip("\n").split("\t")
      if len(parts) % 2:
        raise ValueError(f"{path}:{number}: expected text<TAB>score pairs (the decoder's "
                         "return_beams=true,write_beam_scores=true output), got "
                         f"{len(parts)} fields")
      try:
        rows.append([(parts[i], float(parts[i + 1])) for i in range(0, len(parts), 2)])
      except ValueError:
        raise ValueError(f"{path}:{number}: a score is not a number; write the n-best with "
                         "write_beam_scores=true") from None
  return rows


def utility_function(name: str):
  """sentence-level utility(hypothesis, pseudo-reference) in sacreBLEU's units."""
  if name == "bleu":
    metric = sacrebleu.metrics.BLEU(effective_order=True)
  elif name == "chrf":
    metric = sacrebleu.metrics.CHRF()
  else:
    raise ValueError(f"unknown utility {name!r}: bleu or chrf")
  return lambda hypothesis, reference: metric.sentence_score(hypothesis, [reference]).score


def select(candidates: list[tuple[str, float]], utility, temperature: float) -> str:
  """The candidate maximising sum_j w_j * utility(candidate, candidate_j); ties: the earlier."""
  if temperature < 0:
    raise ValueError(f"temperature must be >= 0, got {temperature}")
  best_score = max(score for _, score in candidates)
  weights = [1.0 if temperature == 0 else math.exp((score - best_score) / temperature)
             for _, score in candidates]
  expected = [sum(w * utility(text, other) for w, (other, _) in zip(weights, candidates))
              for text, _ in candidates]
  return candidates[max(range(len(candidates)), key=lambda i: (expected[i], -i))][0]


def corpus_bleu(hypotheses: list[str], references: list[str]) -> float:
  return sacrebleu.corpus_bleu(hypotheses, [references]).score


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("nbest", help="the decoder's n-best file (text<TAB>score<TAB>...)")
  p.add_argument("--utility", default="chrf", choices=("chrf", "bleu"))
  p.add_argument("--temperature", type=float, default=0.5,
                 help="weights exp((score - best) / T); 0: uniform")
  p.add_argument("--beams", type=int, default=0, help="use the first N candidates (0: all)")
  p.add_argument("--refs", default=None, help="references: print sacreBLEU to stderr")
  p.add_argument("--sweep", action="store_true",
                 help="with --refs: sacreBLEU of every utility, temperature and beams setting")
  args = p.parse_args(argv)
  try:
    rows = read_nbest(args.nbest)
    references = None
    if args.refs:
      with open(args.refs, encoding="utf-8") as f:
        references = [line.rstrip("\n") for line in f]
      if len(references) != len(rows):
        raise ValueError(f"{args.refs} has {len(references)} lines, {args.nbest} {len(rows)}")
    if args.sweep and references is None:
      raise ValueError("--sweep scores settings against references: give --refs")
    if args.beams < 0:
      raise ValueError(f"--beams must be >= 0, got {args.beams}")
    if args.temperature < 0:
      raise ValueError(f"--temperature must be >= 0, got {args.temperature}")
  except (OSError, ValueError) as e:
    print(f"mbr_select: {e}", file=sys.stderr)
    return 2
  first_beam = [r[0][0] for r in rows]
  if args.sweep:
    print(f"first beam\t{corpus_bleu(first_beam, references):.2f}")
    sentence_bleu = utility_function("bleu")
    oracle = [max(r, key=lambda c, ref=ref: sentence_bleu(c[0], ref))[0]
              for r, ref in zip(rows, references)]
    print(f"oracle\t{corpus_bleu(oracle, references):.2f}")
    widest = max(len(r) for r in rows)
    beam_counts = sorted({b for b in (4, 8, widest) if b <= widest})
    for name in ("bleu", "chrf"):
      utility = utility_function(name)
      for temperature in TEMPERATURES:
        for beams in beam_counts:
          chosen = [select(r[:beams], utility, temperature) for r in rows]
          print(f"{name} temperature={temperature} beams={beams}\t"
                f"{corpus_bleu(chosen, references):.2f}", flush=True)
    return 0
  utility = utility_function(args.utility)
  chosen = [select(r[:args.beams] if args.beams else r, utility, args.temperature) for r in rows]
  sys.stdout.write("".join(line + "\n" for line in chosen))
  if references is not None:
    print(f"MBR {corpus_bleu(chosen, references):.2f}, first beam "
          f"{corpus_bleu(first_beam, references):.2f}", file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())
