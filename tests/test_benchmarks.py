"""The benchmark scripts run: each on its smallest configuration (`--smoke`), in seconds.

Timed runs need the machine alone and take tens of minutes; these only check that the scripts
work after a change to the library they time, and the checks they print along the way.
"""

import json
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_script(name, *args, smoke=True, env=None):
  result = subprocess.run([sys.executable, os.path.join(REPO, "scripts", name),
                           *(["--smoke"] if smoke else []), *args],
                          capture_output=True, text=True, timeout=300, env=env)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  return result.stdout


def rate(output, row):
  """The tokens/s figure of a table row, e.g. '| tiny | 1 | greedy, cached | 647 | ...'."""
  match = re.search(re.escape(row) + r" \| ([\d,]+) \|", output)
  assert match, f"no row {row!r} in:\n{output}"
  return int(match.group(1).replace(",", ""))


def number(text):
  return float(text.replace(",", ""))


def check_decode_table(output, length=4):
  """bench_decode's table against its own printed figures, within their roundings only (interval
  arithmetic): every ratio row "| tiny | 1 | A / B | Rx |" is A's target tok/s over B's, and in
  every rate row target tok/s = sentences/s x `length`, GFLOP/s = sentences/s x the FLOPs counted
  per sentence of its search (greedy or beam 4), MFU = GFLOP/s / the printed matmul peak (1.00 at
  the peak's own ceiling). An inverted ratio, or a row's rate over the other search's FLOPs,
  fails. Returns how many ratios were checked."""
  peak = float(re.search(r"float32 matmul peak \(TF, 256\^3, fastest of 5 rounds\): ([\d.]+) GFLOP/s",
                         output).group(1))
  per_sentence = dict(zip(("greedy", "beam 4"), map(float, re.search(
      r"in all greedy ([\d.]+) G, beam 4 ([\d.]+) G", output).groups())))
  rows = {name: [number(n) for n in values] for name, *values in re.findall(
      r"^\| tiny \| 1 \| ([^|]+) \| ([\d,]+) \| ([\d,.]+) \| ([\d.]+) \| ([\d.]+) \|$", output, re.M)}
  assert len(rows) >= 11, output  # 7 timed rows (without CTranslate2), 4 ceilings
  for name, (tokens, sentences, gflops, mfu) in rows.items():
    assert abs(tokens - length * sentences) <= 0.5 + length * 0.05, (name, output)
    assert abs(mfu - gflops / peak) <= 0.005 + 0.05 / peak + 1e-9, (name, output)
    if "at the matmul peak" in name:
      assert mfu == 1.0 and gflops == peak, (name, output)
    flops = per_sentence["beam 4" if "beam 4" in name else "greedy"]  # G, printed to 3 decimals
    low, high = (sentences - 0.05) * (flops - 0.0005), (sentences + 0.05) * (flops + 0.0005)
    assert low - 0.05 <= gflops <= high + 0.05, (name, output)
  rates = {name: values[0] for name, values in rows.items()}
  rates["greedy ceiling"] = number(re.search(r"^\| tiny \| 1 \| greedy ceiling: [^|]+ \| ([\d,]+) \|",
                                             output, re.M).group(1))
  checked = 0
  for a, b, ratio in re.findall(r"^\| tiny \| 1 \| ([^|]+) / ([^|]+) \| ([\d.]+)x \|", output, re.M):
    x = rates[a] if a in rates else rates[a.replace(" ceiling at", " float32 ceiling at")]
    y, half = rates[b], 0.5 * 10 ** -len(ratio.split(".")[1])
    assert (x - 0.5) / (y + 0.5) - half <= float(ratio) <= (x + 0.5) / (y - 0.5) + half, (a, b, output)
    checked += 1
  return checked


# A transformer_tiny training step on a 2x8 batch of 8000 pieces (d 128, ff 512, 2 + 2 layers,
# S = T = 8): 3 x the forward's 2 x multiply-adds. Encoder 2 x 16 (4 d^2 + 2 d ff) + 2 x 2 x 2 x 8^2
# d = 6,356,992; decoder 2 x 16 (6 d^2 + 2 d ff) + 2 x 16 x 2 d^2 + 2 x 2 x (2 x 8^2 d) x 2
# = 8,519,680; output projection 16 d x 8000 = 16,384,000; 3 x 2 x 31,260,672.
TINY_2X8_STEP_FLOPS = 187_564_032


def test_bench_train_smoke(tmp_path):
  # Its temporary files under tmp_path: none may be left behind (each trainer's folder was).
  output = run_script("bench_train.py", env={**os.environ, "TMPDIR": str(tmp_path)})
  assert not list(tmp_path.glob("bench_train_*")), list(tmp_path.iterdir())
  peak = float(re.search(r"^float32 matmul peak \(TF, 2048\^3\): (\d+) GFLOP/s", output, re.M).group(1))
  for name in ("t2t_lite", "t2t_lite XLA"):
    assert rate(output, f"| tiny | 2x8 | {name}") > 0
    # Each row's columns from its own figures, within their roundings: tok/s x s/step is the
    # batch's 16 target tokens, and MFU the step's FLOPs over s/step over the printed peak.
    tokens, step, mfu = (float(n.replace(",", "")) for n in re.search(
        re.escape(f"| tiny | 2x8 | {name} | ") + r"([\d,]+) \| ([\d.]+) \| ([\d.]+) \|$", output,
        re.M).groups())
    assert step > 0.0005, output
    assert (tokens - 0.5) * (step - 0.0005) <= 16 <= (tokens + 0.5) * (step + 0.0005), output
    low = TINY_2X8_STEP_FLOPS / (step + 0.0005) / ((peak + 0.5) * 1e9) - 0.005
    high = TINY_2X8_STEP_FLOPS / (step - 0.0005) / ((peak - 0.5) * 1e9) + 0.005
    assert low <= mfu <= high, (name, low, high, output)


def test_bench_decode_rejects_an_unknown_onednn_cap():
  """A name oneDNN does not know would run uncapped under a capped row's name: exit 2 instead."""
  result = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "bench_decode.py"),
                           "--smoke", "--ctranslate2_isa_caps=AVX3"],
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
  assert "unknown oneDNN instruction set(s) AVX3" in result.stderr and "AVX2" in result.stderr


def test_bench_decode_smoke(tmp_path):
  # Its own --workdir: the default (/tmp/t2t_lite_bench) is a user's benchmark's, whose files this
  # run would overwrite.
  output = run_script("bench_decode.py", f"--workdir={tmp_path}", "--ctranslate2_isa_caps=AVX2")
  for name in ("greedy, cached", "greedy, cached, graph (xla=false)", "beam 4, cached",
               "beam 4, cached, graph (xla=false)", "greedy, uncached",
               "greedy, uncached, whole model (T2T)"):
    assert rate(output, f"| tiny | 1 | {name}") > 0
  assert output.startswith("CPU: ") and "ISA: " in output.split("\n")[0]
  # The uncached baselines and the SavedModel (a default process) are checked against the
  # cached search, token for token.
  assert output.count("outputs identical to cached | 1/1 sentences") == 3
  assert rate(output, "| tiny | 1 | beam 4, SavedModel in a default process") > 0
  # Measured in the same run: the float32 matmul peak and the rates of the model's own products,
  # then every row's GFLOP/s and MFU, and the ceilings of greedy and beam 4 at both.
  assert re.search(r"float32 matmul peak \(TF, 256\^3, fastest of 5 rounds\): [\d.]+ GFLOP/s", output)
  assert re.search(r"tiny: FLOPs counted per sentence .* greedy [\d.]+ G, beam 4 [\d.]+ G", output)
  products = re.findall(r"^\| tiny \| 1 \| \[(\d+), \d+\] x \[\d+, \d+\] \| .* \| \d+ \| ([\d.]+) \| "
                        r"([\d.]+) \|$", output, re.MULTILINE)
  assert {int(rows) for rows, _, _ in products} == {1, 4}, output  # greedy and beam rows; encoder 1 x 4
  assert all(float(xla) > 0 and float(graph) > 0 for _, xla, graph in products), output
  assert re.search(r"^\| tiny \| 1 \| greedy, cached \| [\d,]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \|$",
                   output, re.MULTILINE), output
  for kind in ("greedy", "beam 4"):
    for where in ("the matmul peak (square)", "the decoder-shape rates"):
      assert rate(output, f"| tiny | 1 | {kind} float32 ceiling at {where}") > 0
  # The ratios the README quotes, and each row's columns, from the rows' own figures: cached over
  # both uncached baselines (4), the bandwidth ceiling and the SavedModel's; CTranslate2's 7 more.
  ratios = check_decode_table(output)
  try:
    import ctranslate2  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  except ImportError:
    assert ratios == 6, output
    return
  # CTranslate2 float32 twice (as it starts, and in a process of its own with oneDNN capped at
  # AVX2, which the run does by itself on AVX-512 CPUs): ours and both ceilings over each.
  assert ratios == 19, output
  for name in ("float32, greedy", "float32, beam 4", "int8, greedy", "int8, beam 4",
               "float32, oneDNN at most AVX2, greedy", "float32, oneDNN at most AVX2, beam 4"):
    assert rate(output, f"| tiny | 1 | CTranslate2 {name}") > 0  # the exporter's models
  for peer in ("CTranslate2 float32", "CTranslate2 float32, oneDNN at most AVX2"):
    assert f"greedy outputs identical to {peer}'s | 1/1 sentences" in output
    assert re.search(r"\| beam 4 ceiling at the matmul peak \(square\) / " + re.escape(peer)
                     + r", beam 4 \| [\d.]+x \|", output), output


def test_bench_cache_ops_small():
  # Small shapes: the two score forms must agree (the script asserts it) and the row slices must
  # write the caches the select writes, bit for bit, with the slots at different steps.
  output = run_script("bench_cache_ops.py", "--batch=2", "--slots=3", "--heads=2", "--depth=8",
                      "--entries=5,12", "--positions=4,7", "--steps=3", "--rounds=1", smoke=False)
  assert output.startswith("CPU: ")
  assert len(re.findall(r"^ +\d+ entries: q k\^T +[\d.]+ +q kt +[\d.]+ +[\d.]+x$", output, re.MULTILINE)) == 2
  assert len(re.findall(r"caches identical: True$", output, re.MULTILINE)) == 2, output


def test_profile_decode_small():
  # --kinds above any count of kinds (64 here; 25 by default, which truncated the table): every
  # kind is listed, so the shares, each rounded to 0.1%, sum to 100 within their roundings.
  output = run_script("profile_decode.py", "--shape=tiny", "--beam=2", "--batch=2", "--length=4",
                      "--searches=1", "--top=2", "--timed=1", "--kinds=1000", smoke=False)
  kinds = re.findall(r"^ +([\d.]+) +([\d.]+)% +(\d+)  (.+)$", output, re.MULTILINE)
  assert 0 < len(kinds) < 1000, output
  shares = [float(share) for _, share, _, _ in kinds]
  assert abs(sum(shares) - 100) <= 0.05 * len(shares) + 1e-9, output
  assert shares == sorted(shares, reverse=True), output  # the longest kinds first
  total = float(re.search(r"leaf thunks' thread time: ([\d.]+) ms", output).group(1))
  assert total > 0 and all(int(calls) > 0 for _, _, calls, _ in kinds)
  assert "the 2 longest thunks:" in output
  timed = re.search(r"best of 1 passes without the profiler: ([\d.]+) ms, ([\d,]+) target tokens/s",
                    output)
  assert timed, output
  ms, tokens = float(timed.group(1)), int(timed.group(2).replace(",", ""))
  assert ms > 0 and abs(tokens - 2 * 4 / (ms / 1000)) <= 0.06 * tokens + 1, output  # 2 x 4 tokens


def test_profile_train_small(tmp_path):
  # Both paths in one process (--xla=both; a process each cost TensorFlow's import twice).
  output = run_script("profile_train.py", "--shape=tiny", "--batch=2x4", "--steps=1", "--xla=both",
                      f"--json={tmp_path / 'events.json'}", smoke=False)
  sections = re.split(r"^transformer_tiny.*, batch 2x4, float32, (XLA|graph); 1 steps profiled, .*$",
                      output, flags=re.MULTILINE)
  assert sections[1::2] == ["XLA", "graph"], output
  for path, section in zip(sections[1::2], sections[2::2]):
    kinds = re.findall(r"^ +([\d.]+) +([\d.]+)% +(\d+)  (.+)$", section, re.MULTILINE)
    assert kinds, output
    names = {name for _, _, _, name in kinds}
    assert not any(name.startswith(("ExecutorState", "end: ")) for name in names), names  # containers
    if path == "graph":
      assert "_MklMatMul" in names or "MatMul" in names, names  # the graph's ops, by type
    assert (tmp_path / f"events_{path.lower()}.json").stat().st_size > 2


def test_bench_pipeline_counts_the_batches_the_training_pipeline_makes(multi30k_slice, tmp_path):
  """`scripts/bench_pipeline.py` (docs/data.md's pipeline speeds) on the Multi30k slice's 2,000
  training pairs, as its command line runs it: the JSON it prints, its counts against the token
  budget (every batch's padded size within it, so their sum within 100 budgets, as far as the
  printed roundings tell) and against each other, and the vocabulary it built."""
  raw = tmp_path / "raw"
  raw.mkdir()
  for lang in ("en", "de"):  # translate_ende's layout: its train split is train.en / train.de
    (raw / f"train.{lang}").write_text((multi30k_slice / f"train.{lang}").read_text(encoding="utf-8"),
                                       encoding="utf-8")
  output = run_script("bench_pipeline.py", f"--raw_data_dir={raw}", "--batch_size=512",
                      "--batches=100", smoke=False)
  figures = json.loads(output[output.index("{"):])
  assert figures["corpus"] == str(raw) and figures["batches"] == 100
  assert figures["batch_size_tokens"] == 512 and figures["vocab_size"] > 1000
  assert 0 < figures["tokens_per_s"] <= figures["padded_tokens_per_s"]
  assert figures["pairs_per_s"] < figures["tokens_per_s"]  # captions are longer than one token
  # The padded tokens of the 100 batches, at least (rates rounded to 1, seconds to 0.01): within
  # 100 budgets of 512.
  padded_at_least = (figures["padded_tokens_per_s"] - 0.5) * (figures["seconds"] - 0.005)
  assert padded_at_least <= 100 * 512, figures
  assert figures["padding_fraction"] == pytest.approx(
      1 - figures["tokens_per_s"] / figures["padded_tokens_per_s"], abs=1e-3)
