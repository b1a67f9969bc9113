"""BLEU: sacreBLEU agrees with its command line; the paper's tokenized BLEU checked by hand."""

import math
import os
import random
import re
import subprocess
import sys

import pytest
import sacrebleu

from t2t_lite.bin import bleu as bleu_cli
from t2t_lite.decoding import bleu_score

def corrupt(lines, seed=0):
  """A deterministic "translation": drops about 10% of the words, swaps some neighbours."""
  rng, out = random.Random(seed), []
  for line in lines:
    words = [w for w in line.split() if rng.random() > 0.1]
    for i in range(len(words) - 1):
      if rng.random() < 0.1:
        words[i], words[i + 1] = words[i + 1], words[i]
    out.append(" ".join(words))
  return out


@pytest.fixture
def real_pair(tmp_path, shared_data):
  """newstest2014.de (3003 lines) as reference and a corrupted copy as translation."""
  reference = shared_data / "wmt14" / "newstest2014.de"
  if not reference.exists():
    pytest.skip(f"{reference} not found")
  translation = tmp_path / "newstest2014.corrupted.de"
  translation.write_text("\n".join(corrupt(bleu_score.read_lines(reference))) + "\n", encoding="utf-8")
  return str(translation), str(reference)


def test_cli_agrees_with_the_sacrebleu_command_line(real_pair, capsys):
  translation, reference = real_pair
  assert bleu_cli.main([f"--translation={translation}", f"--reference={reference}"]) == 0
  out = capsys.readouterr().out
  ours = re.search(r"sacreBLEU = ([\d.]+)  \((\S+)\)", out)
  sacrebleu_exe = os.path.join(os.path.dirname(sys.executable), "sacrebleu")
  theirs = subprocess.run([sacrebleu_exe, reference, "-i", translation, "-b", "-w", "2"],
                          capture_output=True, text=True, check=True).stdout.strip()
  assert ours.group(1) == theirs
  assert re.fullmatch(r"nrefs:1\|case:mixed\|eff:no\|tok:13a\|smooth:exp\|version:2\.\S+",
                      ours.group(2))
  # The paper's figure exactly: sacreBLEU's whitespace-split BLEU of the prepared lines, the
  # translation (a tenth of its words dropped: brevity penalty < 1) scored against the reference.
  prepare = lambda path: [bleu_score.split_compounds(bleu_score.moses_tokenize(line))
                          for line in bleu_score.read_lines(path)]
  expected = sacrebleu.metrics.BLEU(tokenize="none", force=True).corpus_score(
      prepare(translation), [prepare(reference)])
  assert expected.bp < 0.95
  assert re.search(r"tokenized BLEU = ([\d.]+)", out).group(1) == f"{expected.score:.2f}"


def test_compound_splitting_matches_perl():
  # Expected output of: perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g' (non-overlapping).
  line = 'Er sagte: "Rich-Text-Format" & a-b-c usw. - ok'
  assert bleu_score.split_compounds(line) == (
      'Er sagte: "Rich ##AT##-##AT## Text ##AT##-##AT## Format" & a ##AT##-##AT## b-c usw. - ok')


def test_moses_tokenizer_de_escapes_like_tokenizer_perl():
  assert bleu_score.moses_tokenize('Er sagte: "Hallo" & ging.') == (
      "Er sagte : &quot; Hallo &quot; &amp; ging .")
  assert bleu_score.moses_tokenize("   ") == ""


def test_tokenized_bleu_by_hand():
  # Tokenized and split: "Die E ##AT##-##AT## Mail ist an ." against "... kam an .":
  # n-gram precisions 6/7, 4/6, 2/5, 1/4, equal lengths (no brevity penalty).
  score = bleu_score.tokenized_bleu(["Die E-Mail ist an."], ["Die E-Mail kam an."])
  assert score == pytest.approx(100 * (6 / 7 * 4 / 6 * 2 / 5 * 1 / 4) ** 0.25, abs=1e-9)
  # Without compound splitting no 3-gram would match: BLEU 0.
  assert bleu_score.multi_bleu(["Die E-Mail ist an ."], ["Die E-Mail kam an ."]) == 0.0
  # A translation shorter than its reference, "Die E ##AT##-##AT## Mail kam ." (6 tokens) against
  # "Die E ##AT##-##AT## Mail kam heute an ." (8): precisions 6/6, 4/5, 3/4, 2/3 and brevity
  # penalty exp(1 - 8/6). The two swapped would score 6/8, 4/7, 3/6, 2/5 without a penalty: 54.1.
  score = bleu_score.tokenized_bleu(["Die E-Mail kam."], ["Die E-Mail kam heute an."])
  assert score == pytest.approx(100 * math.exp(1 - 8 / 6) * (4 / 5 * 3 / 4 * 2 / 3) ** 0.25,
                                abs=1e-9)  # 56.98


def test_multi_bleu_equals_multi_bleu_perl():
  # multi-bleu.perl printed 40.372117 (88.2/57.1/33.3/20.0, BP=0.943) for these lines.
  hypotheses = ["the cat sat on a mat .", "it is nice day , is not it ?", "yes"]
  references = ["the cat sat on the mat .", "it is a nice day , is it not ?", "no"]
  assert bleu_score.multi_bleu(hypotheses, references) == pytest.approx(40.372117, abs=1e-6)


def test_report_has_both_figures():
  report = bleu_score.bleu_report(["Die E-Mail ist an."], ["Die E-Mail kam an."])
  assert report.startswith("sacreBLEU = ") and "tokenized BLEU = 48.89" in report


def test_different_line_counts_are_an_error(tmp_path, capsys):
  with pytest.raises(ValueError, match="3 translation lines but 2 reference lines"):
    bleu_score.sacrebleu_score(["a", "b", "c"], ["a", "b"])
  (tmp_path / "out").write_text("a\nb\nc\n")
  (tmp_path / "ref").write_text("a\nb\n")
  argv = [f"--translation={tmp_path / 'out'}", f"--reference={tmp_path / 'ref'}"]
  assert bleu_cli.main(argv) == 2
  assert "3 translation lines but 2 reference lines" in capsys.readouterr().err


def test_missing_file_is_named(tmp_path, capsys):
  missing = tmp_path / "nope.de"
  (tmp_path / "ref").write_text("a\n")
  assert bleu_cli.main([f"--translation={missing}", f"--reference={tmp_path / 'ref'}"]) == 2
  assert f"translation file not found: {missing}" in capsys.readouterr().err
  with pytest.raises(FileNotFoundError, match="reference file not found"):
    bleu_score.bleu_files(str(tmp_path / "ref"), str(missing))


@pytest.mark.parametrize("lowercase", [False, True])
def test_t2t_bleu_equals_sacrebleu_intl(real_pair, capsys, lowercase):
  """T2T's BLEU_cased / BLEU_uncased are sacreBLEU's `--tokenize intl` without / with `-lc`
  (our international tokenizer and corpus BLEU are our own code, not sacreBLEU's)."""
  translation, reference = real_pair
  variant = "uncased" if lowercase else "cased"
  assert bleu_cli.main([f"--translation={translation}", f"--reference={reference}",
                        f"--bleu_variant={variant}"]) == 0
  ours = re.search(rf"BLEU_{variant} = +([\d.]+)", capsys.readouterr().out).group(1)
  sacrebleu_exe = os.path.join(os.path.dirname(sys.executable), "sacrebleu")
  theirs = subprocess.run([sacrebleu_exe, reference, "-i", translation, "-b", "-w", "2",
                           "--tokenize", "intl", *(["-lc"] if lowercase else [])],
                          capture_output=True, text=True, check=True).stdout.strip()
  assert float(ours) == float(theirs)


def test_t2t_bleu_smoothing_brevity_and_case_equal_sacrebleu_intl():
  """On lines where what the corrupted newstest pair never reaches decides the score: 3- and
  4-grams without a match (NIST's smoothing, 1 / (2^k * candidates)), a translation shorter than
  its reference (brevity penalty 0.67) and words that differ in case only (BLEU_cased below
  BLEU_uncased). The reference: sacreBLEU's `intl` tokenizer and `exp` smoothing, its Python API."""
  hypotheses = ["der Hund läuft schnell heim.", "Ein Mann, der liest.", "ZWEI Katzen!"]
  references = ["Der Hund rennt schnell nach Hause.", "Ein Mann liest ein dickes Buch.",
                "Zwei Katzen schlafen auf dem Sofa."]
  scores = {}
  for lowercase in (False, True):
    theirs = sacrebleu.metrics.BLEU(tokenize="intl", lowercase=lowercase).corpus_score(
        hypotheses, [references])
    assert theirs.counts[2:] == [0, 0] and theirs.bp < 0.7  # the branches this test is for
    scores[lowercase] = bleu_score.t2t_bleu(hypotheses, references, case_sensitive=not lowercase)
    assert scores[lowercase] == pytest.approx(theirs.score, abs=1e-9)
  assert scores[False] < scores[True]
