"""The decoder's search (`Translator`, XLA) on real lines under several decode settings, timed in
interleaved rounds in one process, outputs compared with the first setting's.

    python scripts/bench_translator.py --model_dir=runs/base_bench \
      --lines=../shared/data/multi30k/test_2016_flickr.en --num_lines=256 \
      --decode_hparams=beam_stop=finished --settings="shrink_batch=0;shrink_batch=4"

Each setting's model is loaded once and translates the lines once to compile its programs (the
"compile pass", printed), then every round translates them once per setting, one after another;
the best round is reported. What a setting changes is added to the problem's decode defaults and
`--decode_hparams`. docs/performance.md gives the figures ("The batch shrinks as its sentences end").
"""

import argparse
import time


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--model_dir", required=True)
  p.add_argument("--lines", required=True, help="source lines, one sentence each")
  p.add_argument("--num_lines", type=int, default=256, help="the first this many --lines")
  p.add_argument("--decode_hparams", default="", help="overrides for every setting")
  p.add_argument("--settings", default="shrink_batch=0;shrink_batch=4",
                 help="';'-separated decode hparam overrides, one per setting; the first is the reference")
  p.add_argument("--rounds", type=int, default=1)
  args = p.parse_args(argv)
  from t2t_lite import model_dir as model_dirs  # pylint: disable=import-outside-toplevel
  from t2t_lite.decoding.translator import load_translator  # pylint: disable=import-outside-toplevel
  with open(args.lines, encoding="utf-8") as f:
    lines = f.read().splitlines()[:args.num_lines]
  settings = [s.strip() for s in args.settings.split(";")]
  translators, outputs = {}, {}
  for setting in settings:
    hparams = model_dirs.model_decode_defaults(args.model_dir)
    for overrides in (args.decode_hparams, setting):
      hparams = hparams.parse(overrides) if overrides else hparams
    translators[setting], _ = load_translator(args.model_dir, hparams)
    start = time.perf_counter()
    outputs[setting] = translators[setting].translate(lines)
    print(f"{setting or '(defaults)'}: compile pass {time.perf_counter() - start:.1f} s", flush=True)
  times = {setting: [] for setting in settings}
  for _ in range(args.rounds):
    for setting in settings:
      start = time.perf_counter()
      translators[setting].translate(lines)
      times[setting].append(time.perf_counter() - start)
  reference = settings[0]
  print(f"{len(lines)} lines of {args.lines}; decode hparams {args.decode_hparams or '(defaults)'}")
  print("| setting | seconds (best round) | sentences/s | over the first | lines identical to the first's |")
  print("|---|---|---|---|---|")
  for setting in settings:
    best = min(times[setting])
    same = sum(a == b for a, b in zip(outputs[setting], outputs[reference]))
    print(f"| {setting or '(defaults)'} | {best:.1f} | {len(lines) / best:.2f} | "
          f"{min(times[reference]) / best:.2f}x | {same}/{len(lines)} |")


if __name__ == "__main__":
  main()
