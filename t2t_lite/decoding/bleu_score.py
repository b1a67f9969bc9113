"""BLEU, scored honestly (REFERENCE.md section 5): on real text, never on ids.

- `sacrebleu_score`: today's standard, sacreBLEU on detokenized text with its signature
  (`nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`).
- `t2t_bleu`: what T2T's `t2t-bleu` prints as BLEU_cased / BLEU_uncased (utils/bleu_hook.py):
  mteval-v14's international tokenization (punctuation split from a neighbour that is not a
  digit, every symbol split; Unicode categories P* and S*), corpus BLEU-4 with NIST's
  geometric smoothing of n-gram orders without a match; uncased lower-cases both sides first.
  This is sacreBLEU's `--tokenize intl` (with `-lc` for uncased), which T2T papers and logs quote.
- `tokenized_bleu`: the paper's figure, T2T's `utils/get_ende_bleu.sh` redone in Python:
  1. `tokenizer.perl -l de` (Moses; escaping on, no aggressive hyphen splitting) -> sacremoses.
     sacremoses keeps a sentence-final abbreviation's period attached ("usw."), as tokenizer.perl
     did until the end of 2018 (moses-smt/mosesdecoder#204), i.e. when the paper was scored.
  2. compound splitting, `perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'` -> `split_compounds`.
  3. `multi-bleu.perl` (case-sensitive, no smoothing) -> `multi_bleu`, sacreBLEU with
     `tokenize="none", smooth_method="none"`, which splits on whitespace as multi-bleu does.
  Both sides (translation and reference) go through steps 1 and 2.

Example:

    >>> split_compounds("ein rich-text Format")
    'ein rich ##AT##-##AT## text Format'
"""

import collections
import functools
import math
import re
import sys
import unicodedata

import sacrebleu
from sacremoses import MosesTokenizer

_COMPOUND = re.compile(r"(\S)-(\S)")


def read_lines(path: str, what: str = "file") -> list[str]:
  """The lines of a UTF-8 text file, without their line ends.

  Raises:
    FileNotFoundError: naming `what` and the path.
  """
  try:
    with open(path, encoding="utf-8", newline="\n") as f:
      return [line.rstrip("\r\n") for line in f]
  except FileNotFoundError:
    raise FileNotFoundError(f"{what} not found: {path}") from None


def _check_pair(hypotheses, references):
  if isinstance(hypotheses, str) or isinstance(references, str):
    raise TypeError("hypotheses and references must be lists of lines, not one string")
  if len(hypotheses) != len(references):
    raise ValueError(f"{len(hypotheses)} translation lines but {len(references)} reference lines: "
                     "each translation line must have exactly one reference line")
  if not hypotheses:
    raise ValueError("no lines to score")


def sacrebleu_score(hypotheses: list[str], references: list[str]) -> tuple[float, str]:
  """sacreBLEU on detokenized text. Returns (score in 0-100, signature string)."""
  _check_pair(hypotheses, references)
  metric = sacrebleu.metrics.BLEU()
  score = metric.corpus_score(list(hypotheses), [list(references)])
  return score.score, str(metric.get_signature())


@functools.cache
def _moses_tokenizer(lang):
  return MosesTokenizer(lang=lang)


def moses_tokenize(line: str, lang: str = "de") -> str:
  """`tokenizer.perl -l LANG` on one line (escaping on, as the script runs it)."""
  if not line.strip():
    return ""  # tokenizer.perl copies blank lines through
  return _moses_tokenizer(lang).tokenize(line, return_str=True, escape=True)


def split_compounds(line: str) -> str:
  """`a-b` -> `a ##AT##-##AT## b`, non-overlapping left to right like perl's `s{}{}g`."""
  return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", line)


def multi_bleu(hypotheses: list[str], references: list[str]) -> float:
  """`multi-bleu.perl` on pre-tokenized lines (one reference, case-sensitive, no smoothing)."""
  _check_pair(hypotheses, references)
  metric = sacrebleu.metrics.BLEU(tokenize="none", smooth_method="none", force=True)
  return metric.corpus_score(list(hypotheses), [list(references)]).score


def tokenized_bleu(hypotheses: list[str], references: list[str], lang: str = "de") -> float:
  """The paper's tokenized BLEU (T2T's get_ende_bleu.sh) on detokenized lines, in 0-100."""
  _check_pair(hypotheses, references)
  prepare = lambda line: split_compounds(moses_tokenize(line, lang))
  return multi_bleu([prepare(line) for line in hypotheses], [prepare(line) for line in references])


@functools.cache
def _international_rules():
  """mteval-v14's international tokenization as (pattern, replacement) pairs."""
  chars = [chr(c) for c in range(sys.maxunicode + 1)]
  of_category = lambda prefix: re.escape("".join(
      c for c in chars if unicodedata.category(c).startswith(prefix)))
  punctuation, symbols = of_category("P"), of_category("S")
  return ((re.compile(rf"([^\d])([{punctuation}])"), r"\1 \2 "),   # x, -> x ,
          (re.compile(rf"([{punctuation}])([^\d])"), r" \1 \2"),   # ,x -> , x (not 1,000)
          (re.compile(rf"([{symbols}])"), r" \1 "))                 # $5 -> $ 5


def international_tokenize(line: str) -> list[str]:
  """T2T's `bleu_tokenize`: "It costs $5,000." -> ['It', 'costs', '$', '5,000.']
  (a number keeps its separators, and a final period after a digit stays, as in mteval)."""
  for pattern, replacement in _international_rules():
    line = pattern.sub(replacement, line)
  return line.split()


def _ngrams(tokens, max_order):
  return collections.Counter(tuple(tokens[i:i + n]) for n in range(1, max_order + 1)
                             for i in range(len(tokens) - n + 1))


def corpus_bleu(hypotheses: list[list[str]], references: list[list[str]],
                max_order: int = 4) -> float:
  """BLEU of token lists in 0-100, T2T's `compute_bleu`: clipped n-gram precisions; an order
  with candidates but no match counts 1 / (2^k * candidates) for its k-th occurrence (NIST);
  brevity penalty exp(1 - reference length / hypothesis length) when shorter."""
  matches, candidates = [0] * max_order, [0] * max_order
  hypothesis_length = reference_length = 0
  for hypothesis, reference in zip(hypotheses, references):
    hypothesis_length += len(hypothesis)
    reference_length += len(reference)
    hypothesis_counts, reference_counts = _ngrams(hypothesis, max_order), _ngrams(reference, max_order)
    for ngram, count in hypothesis_counts.items():
      candidates[len(ngram) - 1] += count
      matches[len(ngram) - 1] += min(count, reference_counts[ngram])
  log_precisions, smoothing = [], 1.0
  for order_matches, order_candidates in zip(matches, candidates):
    if not order_candidates:
      continue  # T2T: precision 0, left out of the sum (but still divided by max_order)
    if order_matches:
      log_precisions.append(math.log(order_matches / order_candidates))
    else:
      smoothing *= 2
      log_precisions.append(math.log(1.0 / (smoothing * order_candidates)))
  if not log_precisions:
    return 0.0
  ratio = hypothesis_length / reference_length if reference_length else 1.0
  brevity = 1.0 if ratio >= 1.0 else (math.exp(1 - 1 / ratio) if ratio > 0 else 0.0)
  return 100.0 * brevity * math.exp(sum(log_precisions) / max_order)


def t2t_bleu(hypotheses: list[str], references: list[str], case_sensitive: bool = True) -> float:
  """T2T's BLEU_cased (or, not `case_sensitive`, BLEU_uncased) of detokenized lines, 0-100."""
  _check_pair(hypotheses, references)
  prepare = lambda line: international_tokenize(line if case_sensitive else line.lower())
  return corpus_bleu([prepare(line) for line in hypotheses], [prepare(line) for line in references])


def t2t_bleu_report(hypotheses: list[str], references: list[str], variant: str = "both") -> str:
  """T2T's t2t-bleu lines: `BLEU_uncased =  38.12` and `BLEU_cased =  37.50` ("%6.2f")."""
  lines = []
  if variant in ("uncased", "both"):
    lines.append(f"BLEU_uncased = {t2t_bleu(hypotheses, references, False):6.2f}")
  if variant in ("cased", "both"):
    lines.append(f"BLEU_cased = {t2t_bleu(hypotheses, references, True):6.2f}")
  return "\n".join(lines)


def bleu_report(hypotheses: list[str], references: list[str], lang: str = "de") -> str:
  """Both figures, one per line, for logs and the decoder's --decode_reference."""
  score, signature = sacrebleu_score(hypotheses, references)
  tokenized = tokenized_bleu(hypotheses, references, lang)
  return (f"sacreBLEU = {score:.2f}  ({signature})\n"
          f"tokenized BLEU = {tokenized:.2f}  (Moses tokenizer -l {lang}, compound splitting, "
          f"multi-bleu; the paper's recipe, {len(hypotheses)} lines)")


def bleu_files(translation_path: str, reference_path: str, lang: str = "de",
               t2t_variant: str = "both") -> str:
  """`bleu_report` on two files (one sentence per line), then T2T's BLEU_uncased / BLEU_cased
  (`t2t_variant`: "both", "cased", "uncased" or "none")."""
  hypotheses = read_lines(translation_path, "translation file")
  references = read_lines(reference_path, "reference file")
  report = bleu_report(hypotheses, references, lang)
  if t2t_variant != "none":
    report += "\n" + t2t_bleu_report(hypotheses, references, t2t_variant)
  return report
