"""Where an XLA-compiled search spends its time: a per-thunk profile of `bench_decode`'s fixed work.

    python scripts/profile_decode.py --shape=base --beam=4        # beam 4, base, batch 64
    python scripts/profile_decode.py --shape=base --beam=1        # greedy
    python scripts/profile_decode.py --model_dir=runs/multi30k/averaged \
      --lines=../shared/data/multi30k/test_2016_flickr.en           # a trained model, real lines

Builds the shape's model (random weights, as `bench_decode`), compiles the search with XLA on
`--batch` sources of `--length` tokens with EOS made impossible (every output `--length` tokens,
the benchmark's fixed work), runs it twice to compile and warm up, then `--searches` times under
`tf.profiler` with XLA's CPU thunks traced (`--xla_cpu_enable_xprof_traceme`). It prints the
thread time of the leaf thunks summed by kind (a fusion, dot or copy's name without its number:
`dot`, `loop_dynamic_update_slice_fusion`, ...), each with its share, the count of its calls and
the search's wall time. With `--model_dir` and `--lines`, it profiles instead one pass of
that model's in-process search over the lines (set up as `bench_decode --model_dir` and the
decoder set it up: the problem's decode defaults and constraint, `--beam` if given, the
non-empty lines in batches of `--batch` sorted by length, each batch shape compiled before;
`--decode_hparams=name=value,...` over those defaults, e.g. `beam_stop=finished`).
`--top=N` also prints the N single thunks that took longest; `--json=F` writes every thunk's
time and count to F, for comparing two profiles; `--timed=N` first times N passes without the
profiler and prints the best (with `XLA_FLAGS` set: what a flag does to the search's speed).
Thread time sums over the threads XLA runs thunks on, so shares are the useful figure; run it
alone on the machine.
"""

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_xprof_traceme=true").strip()

import argparse  # noqa: E402

import benchmarking  # noqa: E402  (before TensorFlow: its environment)
from bench_decode import fixed_sources, fixed_work_search, length_sorted_chunks, restore_for_search  # noqa: E402
from benchmarking import print_thunk_profile, profile  # noqa: E402

from t2t_lite import cpu  # noqa: E402
from t2t_lite.decoding.translator import Translator, encode_sources  # noqa: E402

def fixed_work(args):
  """`bench_decode`'s fixed work: random weights, outputs of exactly `--length` tokens."""
  beam = args.beam or 4
  model = benchmarking.build_model(args.shape)
  source = fixed_sources(model.vocab_size, args.batch, args.length)
  search = fixed_work_search(model, beam)
  what = (f"{args.shape}, batch {args.batch}, {'greedy' if beam == 1 else f'beam {beam}'}, "
          f"{args.length} tokens in and out, XLA")
  return (lambda: [t.numpy() for t in search(source)]), what


def real_lines(args):
  """One pass of a trained model's in-process search over `--lines`, batches sorted by length."""
  model, vocab, decode, constraint = restore_for_search(args.model_dir, args.batch)
  if args.beam:
    decode = decode.replace(beam_size=args.beam)
  if args.decode_hparams:
    decode = decode.parse(args.decode_hparams)
  translator = Translator(model, vocab, decode, warn=lambda _: None, constraint=constraint)
  with open(args.lines, encoding="utf-8") as f:
    lines = f.read().splitlines()
  sources = encode_sources(vocab, lines, translator.limit, warn=lambda _: None)
  batches = [[sources[i] for i in chunk] for chunk in length_sorted_chunks(sources, args.batch)]

  def run():
    for batch in batches:
      translator.translate_ids(batch, best_only=True)  # as the decoder
  what = (f"{args.model_dir}: {len(lines)} lines of {args.lines}, batches of {args.batch}, "
          f"beam {decode.beam_size}, alpha {decode.alpha}" +
          (f", {args.decode_hparams}" if args.decode_hparams else ""))
  return run, what


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--shape", choices=sorted(benchmarking.SHAPES), default="base")
  parser.add_argument("--beam", type=int, help="beam size (1: greedy); default 4, or the "
                      "problem's with --model_dir")
  parser.add_argument("--model_dir", help="a trained model directory (with --lines)")
  parser.add_argument("--lines", help="source lines to translate (with --model_dir)")
  parser.add_argument("--decode_hparams", default="",
                      help="with --model_dir: name=value,... over the problem's decode defaults "
                           "(e.g. beam_stop=finished)")
  parser.add_argument("--batch", type=int, default=64)
  parser.add_argument("--length", type=int, default=30, help="source and output tokens")
  parser.add_argument("--searches", type=int, default=2, help="searches profiled")
  parser.add_argument("--kinds", type=int, default=25, help="thunk kinds printed")
  parser.add_argument("--top", type=int, default=0, help="also print the N longest single thunks")
  parser.add_argument("--json", help="write every thunk's (ms, count) here")
  parser.add_argument("--timed", type=int, default=0,
                      help="first time this many passes without the profiler; print the best")
  args = parser.parse_args()
  if min(args.beam or 1, args.batch, args.length, args.searches) < 1 or args.timed < 0:
    parser.error("--beam, --batch, --length and --searches must be >= 1, --timed >= 0")
  if bool(args.model_dir) != bool(args.lines):
    parser.error("--model_dir and --lines go together: a trained model and the lines it translates")
  run, what = (real_lines(args) if args.model_dir else fixed_work(args))
  for _ in range(2):  # compile, then warm
    run()
  if args.timed:
    ms = benchmarking.milliseconds({"search": run}, repeats=1, rounds=args.timed)["search"]
    tokens = "" if args.model_dir else f", {args.batch * args.length / (ms / 1000):,.0f} target tokens/s"
    print(f"{what}; best of {args.timed} passes without the profiler: {ms:.1f} ms{tokens}", flush=True)
  times, wall = profile(run, args.searches)
  print(cpu.describe())
  print(f"{what}; {args.searches} passes profiled, {wall:.0f} ms each (wall, under the profiler)")
  print_thunk_profile(times, args.searches, args.kinds, args.top, args.json)


if __name__ == "__main__":
  main()
