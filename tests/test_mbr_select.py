"""scripts/mbr_select.py: minimum Bayes risk selection over the decoder's n-best files, checked
against sacreBLEU's sentence scores summed by hand."""

import pathlib
import sys

import pytest
import sacrebleu

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))
import mbr_select  # noqa: E402

CANDIDATES = [("Ein Hund rennt über die Wiese .", -0.5),
              ("Ein Hund läuft über eine Wiese .", -0.9),
              ("Ein Hund läuft über die Wiese .", -1.0),
              ("Zwei Katzen schlafen .", -1.1)]
SECOND = [("Zwei Katzen schlafen .", -0.2), ("Zwei Katzen schlafen", -0.9),
          ("Ein Hund rennt über die Wiese .", -1.5)]


def brute_force(candidates, metric, temperature):
  best = max(s for _, s in candidates)
  weights = [1.0 if temperature == 0 else 2.718281828459045 ** ((s - best) / temperature)
             for _, s in candidates]
  gains = []
  for text, _ in candidates:
    gains.append(sum(w * metric.sentence_score(text, [other]).score
                     for w, (other, _) in zip(weights, candidates)))
  return candidates[gains.index(max(gains))][0]


@pytest.mark.parametrize("name,metric", [("chrf", sacrebleu.metrics.CHRF()),
                                         ("bleu", sacrebleu.metrics.BLEU(effective_order=True))])
@pytest.mark.parametrize("temperature", [0.0, 0.5, 2.0])
def test_selection_equals_the_expected_utility_summed_by_hand(name, metric, temperature):
  chosen = mbr_select.select(CANDIDATES, mbr_select.utility_function(name), temperature)
  assert chosen == brute_force(CANDIDATES, metric, temperature)


def test_consensus_beats_the_first_beam_and_a_cold_temperature_keeps_it():
  utility = mbr_select.utility_function("chrf")
  # Uniform weights: the middle reading, closest to the others, wins over the first beam.
  assert mbr_select.select(CANDIDATES, utility, 0.0) == "Ein Hund läuft über die Wiese ."
  # All weight on the best-scoring candidate: it is its own closest match.
  assert mbr_select.select(CANDIDATES, utility, 0.01) == CANDIDATES[0][0]


def test_command_writes_one_selection_per_line_and_scores_against_references(tmp_path, capsys):
  nbest = tmp_path / "nbest.tsv"
  nbest.write_text("".join("\t".join(f"{t}\t{s}" for t, s in rows) + "\n"
                           for rows in (CANDIDATES, SECOND)),
                   encoding="utf-8")
  refs = tmp_path / "refs.de"
  refs.write_text("Ein Hund läuft über die Wiese .\nZwei Katzen schlafen .\n", encoding="utf-8")
  assert mbr_select.main([str(nbest), "--temperature=0", "--refs", str(refs)]) == 0
  out, err = capsys.readouterr()
  assert out.splitlines() == ["Ein Hund läuft über die Wiese .", "Zwei Katzen schlafen ."]
  first = sacrebleu.corpus_bleu([CANDIDATES[0][0], SECOND[0][0]],
                                [refs.read_text(encoding="utf-8").splitlines()]).score
  assert first < 100   # the first beams differ from the references: the two figures differ
  assert err.splitlines() == [f"MBR 100.00, first beam {first:.2f}"], err
  assert mbr_select.main([str(nbest), "--sweep", "--refs", str(refs)]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert lines[:2] == [f"first beam\t{first:.2f}", "oracle\t100.00"]
  assert len(lines) == 2 + 2 * len(mbr_select.TEMPERATURES) * 1  # the widest list: 4 beams
  # Each setting's line: corpus sacreBLEU of the selections brute_force makes with it.
  metrics = {"bleu": sacrebleu.metrics.BLEU(effective_order=True), "chrf": sacrebleu.metrics.CHRF()}
  expected = []
  for name, metric in metrics.items():
    for temperature in mbr_select.TEMPERATURES:
      chosen = [brute_force(rows, metric, temperature) for rows in (CANDIDATES, SECOND)]
      score = sacrebleu.corpus_bleu(chosen, [refs.read_text(encoding="utf-8").splitlines()]).score
      expected.append(f"{name} temperature={temperature} beams=4\t{score:.2f}")
  assert lines[2:] == expected
  assert len({line.split("\t")[1] for line in expected}) > 1  # the settings choose differently


def test_beams_keeps_the_first_candidates_only(tmp_path, capsys):
  """--beams=N selects among each line's first N candidates: 2 leaves out the consensus
  reading (the third), which all 4 choose at temperature 0; 1 is the first beam."""
  nbest = tmp_path / "nbest.tsv"
  nbest.write_text("\t".join(f"{t}\t{s}" for t, s in CANDIDATES) + "\n", encoding="utf-8")
  chrf = sacrebleu.metrics.CHRF()
  for beams, expected in ((0, brute_force(CANDIDATES, chrf, 0.0)),
                          (2, brute_force(CANDIDATES[:2], chrf, 0.0)), (1, CANDIDATES[0][0])):
    assert mbr_select.main([str(nbest), "--temperature=0", f"--beams={beams}"]) == 0
    assert capsys.readouterr().out == expected + "\n", beams
  assert brute_force(CANDIDATES[:2], chrf, 0.0) != brute_force(CANDIDATES, chrf, 0.0)


@pytest.mark.parametrize("content,args,message", [
    ("a\t-1\tb\n", [], "expected text<TAB>score pairs"),
    ("a\tb\n", [], "a score is not a number"),
    ("a\t-1\n", ["--sweep"], "give --refs"),
    ("a\t-1\n", ["--temperature=-1"], "--temperature must be >= 0"),
    ("a\t-1\n", ["--beams=-1"], "--beams must be >= 0, got -1"),
    ("a\t-1\n", ["--refs={refs}"], "{refs} has 2 lines, {nbest} 1"),
])
def test_bad_input_exits_2_with_what_to_fix(tmp_path, capsys, content, args, message):
  nbest = tmp_path / "nbest.tsv"
  nbest.write_text(content, encoding="utf-8")
  refs = tmp_path / "refs.de"  # two references for the one-line n-best
  refs.write_text("a\nb\n", encoding="utf-8")
  fill = lambda text: text.format(refs=refs, nbest=nbest)  # noqa: E731
  assert mbr_select.main([str(nbest)] + [fill(a) for a in args]) == 2
  assert fill(message) in capsys.readouterr().err
