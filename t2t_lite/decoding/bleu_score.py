"""BLEU, scored honestly (REFERENCE.md section 5): two figures, both on real text, never on ids.

- `sacrebleu_score`: today's standard, sacreBLEU on detokenized text with its signature
  (`nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`).
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

import functools
import re

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


def bleu_report(hypotheses: list[str], references: list[str], lang: str = "de") -> str:
  """Both figures, one per line, for logs and the decoder's --decode_reference."""
  score, signature = sacrebleu_score(hypotheses, references)
  tokenized = tokenized_bleu(hypotheses, references, lang)
  return (f"sacreBLEU = {score:.2f}  ({signature})\n"
          f"tokenized BLEU = {tokenized:.2f}  (Moses tokenizer -l {lang}, compound splitting, "
          f"multi-bleu; the paper's recipe, {len(hypotheses)} lines)")


def bleu_files(translation_path: str, reference_path: str, lang: str = "de") -> str:
  """`bleu_report` on two files (one sentence per line)."""
  hypotheses = read_lines(translation_path, "translation file")
  references = read_lines(reference_path, "reference file")
  return bleu_report(hypotheses, references, lang)
