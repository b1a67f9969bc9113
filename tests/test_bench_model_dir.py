"""`scripts/bench_decode.py --model_dir`: a trained model's real lines through the decoder command,
the SavedModel in default processes and the in-process search with and without cache phases.

Apart from tests/test_benchmarks.py (whose `run_script` it uses) so that pytest-xdist, which
hands out whole files, can run this long test beside the other benchmark smokes.
"""

import re

from test_benchmarks import run_script


def test_bench_decode_model_dir_rows_and_cache_phases(tiny_model_dir, short_lines, tmp_path):
  """`--model_dir --saved_model_decode_hparams=... --compare_saved_model_decode_hparams=...`, in
  one run (each run is a process that imports TensorFlow and restores the model; the in-process
  rows were a `--cache_phases_only` run of their own until 2026-11-29): the decoder command, then a
  SavedModel and one that also refills 4 slots, both in default processes with their rounds
  interleaved; and the in-process search with and without cache phases, and stopping for the
  n-best list. Each row's rate, and outputs equal to the decoder's; the phases' outputs compared
  with one cache phase's and the n-best list's stop; steps and ms/step per width bucket. Both
  exports stop at 16 source subwords (the lines are shorter, so the outputs are the decoder's):
  one width bucket to trace instead of 5."""
  model_dir, _ = tiny_model_dir
  output = run_script("bench_decode.py", f"--model_dir={model_dir}",
                      f"--lines={short_lines}", f"--workdir={tmp_path}", "--ctranslate2_isa_caps=AVX2",
                      "--rounds=1", "--batch=8",
                      "--saved_model_decode_hparams=max_input_size=16",
                      "--compare_saved_model_decode_hparams=max_input_size=16,refill_slots=4")
  assert "SavedModel decode hparams: max_input_size=16" in output
  rows = [f"SavedModel{label}, default process ({what})"
          for label in ("", " (max_input_size=16,refill_slots=4)")
          for what in ("translation only, best round", "start-up + first pass, compiles")]
  # The decoder command twice on one fresh XLA cache folder: compiling, then loading the programs
  # (the second run's outputs against the first's).
  rows += [f"t2t-lite-decoder (whole command, start-up included, {state} XLA cache)"
           for state in ("cold", "warm")]
  rows += [f"t2t_lite search, {name} (in process, best round, batches of 8)"
           for name in ("cache in phases", "one cache phase",
                        "cache in phases, stopping when the n-best list is final")]
  try:  # the exporter's models with ctranslate2 and sentencepiece only, each in a process of its own
    import ctranslate2  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    rows += [f"CTranslate2 {name} (translation only, best round)"
             for name in ("float32", "float32, oneDNN at most AVX2", "int8")]
  except ImportError:
    pass
  for name in rows:
    row = re.search(re.escape(f"| {name} | ") + r"([\d,.]+) \| [\d.]+ \| (\d+)/24 \|", output)
    assert row and float(row.group(1).replace(",", "")) > 0, (name, output)
    # t2t_lite's own rows translate as the decoder; CTranslate2's search stops by its own rule
    # (docs/ctranslate2.md), so most, not all, of its lines are the decoder's.
    assert int(row.group(2)) >= (12 if name.startswith("CTranslate2") else 24), (name, output)
  assert "outputs identical to one cache phase's: 24/24 lines" in output
  assert "outputs identical to stopping at the n-best list: 24/24 lines" in output
  # Per width bucket (24 short lines: three batches of 8, width 16): steps run and both ms/step.
  buckets = re.findall(r"^\| (\d+) \| (\d+) \| (\d+) \(\d+-\d+\) \| (\d+) \| ([\d.]+) \| ([\d.]+) \| "
                       r"[\d.]+x \| (\d+) \| [\d.]+ \|$", output, re.MULTILINE)
  assert buckets and sum(int(b[1]) for b in buckets) == 3, output
  assert all(int(b[2]) > 0 and float(b[4]) > 0 and float(b[5]) > 0 for b in buckets), output
  # The n-best list's rule never stops before the best beam's.
  assert all(int(b[6]) >= int(b[2]) for b in buckets), output


def test_bench_translator_times_settings_and_compares_their_outputs(tiny_model_dir, short_lines):
  """`scripts/bench_translator.py` (docs/performance.md's shrinking figures) on the 24 short
  lines in batches of 8: its compile pass and table row for each setting, the ratio of the best
  rounds from the rows' own seconds, and the lines identical to the first setting's (a shrinking
  batch translates as the whole batch does)."""
  model_dir, _ = tiny_model_dir
  output = run_script("bench_translator.py", f"--model_dir={model_dir}", f"--lines={short_lines}",
                      "--decode_hparams=batch_size=8,beam_size=2", "--rounds=2",
                      "--settings=shrink_batch=0;shrink_batch=4", smoke=False)
  assert re.findall(r"^(shrink_batch=\d): compile pass [\d.]+ s$", output, re.MULTILINE) == [
      "shrink_batch=0", "shrink_batch=4"], output
  assert f"24 lines of {short_lines}; decode hparams batch_size=8,beam_size=2" in output
  rows = re.findall(r"^\| (shrink_batch=\d) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+)x \| (\d+)/24 \|$",
                    output, re.MULTILINE)
  assert [(name, same) for name, _, _, _, same in rows] == [("shrink_batch=0", "24"),
                                                            ("shrink_batch=4", "24")], output
  # The rows' own figures, within their roundings (seconds to 0.1, the rest to 0.01).
  (_, first, _, one, _), (_, seconds, per_s, ratio, _) = rows
  first, seconds, per_s, ratio = (float(x) for x in (first, seconds, per_s, ratio))
  low, high = max(seconds - 0.05, 1e-3), seconds + 0.05
  assert float(one) == 1.0 and 24 / high - 0.005 <= per_s <= 24 / low + 0.005, output
  assert (max(first - 0.05, 0) / high - 0.005 <= ratio <= (first + 0.05) / low + 0.005), output
