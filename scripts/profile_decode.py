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
that model's in-process search over the lines (the problem's decode defaults, `--beam` if
given, batches of `--batch` sorted by length, each batch shape compiled before). `--top=N` also
prints the N single thunks that took longest; `--json=F` writes every thunk's time and count to
F, for comparing two profiles. Thread time sums over the threads XLA runs thunks on, so shares
are the useful figure; run it alone on the machine.
"""

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_xprof_traceme=true").strip()

import argparse  # noqa: E402

import benchmarking  # noqa: E402  (before TensorFlow: its environment)
from benchmarking import print_thunk_profile, profile  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from bench_decode import NoEos  # noqa: E402

from t2t_lite import cpu  # noqa: E402
from t2t_lite import model_dir as model_dir_lib  # noqa: E402
from t2t_lite.decoding.translator import Translator, encode_sources, make_search_fn  # noqa: E402
from t2t_lite.hparams import DecodeHParams  # noqa: E402
from t2t_lite.token_ids import EOS_ID  # noqa: E402

def fixed_work(args):
  """`bench_decode`'s fixed work: random weights, outputs of exactly `--length` tokens."""
  beam = args.beam or 4
  model = benchmarking.build_model(args.shape)
  source = np.random.default_rng(0).integers(2, model.vocab_size, (args.batch, args.length))
  source[:, -1] = EOS_ID
  source = tf.constant(source, tf.int32)
  decode = DecodeHParams(beam_size=beam, extra_length=0, xla=True)
  search = tf.function(make_search_fn(NoEos(model), decode, 1024), jit_compile=True)
  what = (f"{args.shape}, batch {args.batch}, {'greedy' if beam == 1 else f'beam {beam}'}, "
          f"{args.length} tokens in and out, XLA")
  return (lambda: [t.numpy() for t in search(source)]), what


def real_lines(args):
  """One pass of a trained model's in-process search over `--lines`, batches sorted by length."""
  _, model, _ = model_dir_lib.restore_model(args.model_dir)
  vocab = model_dir_lib.load_vocab(args.model_dir)
  problem = model_dir_lib.find_problem(model_dir_lib.read_record(args.model_dir)["problem"])
  decode = model_dir_lib.decode_defaults(problem).replace(batch_size=args.batch)
  if args.beam:
    decode = decode.replace(beam_size=args.beam)
  translator = Translator(model, vocab, decode, warn=lambda _: None)
  with open(args.lines, encoding="utf-8") as f:
    lines = f.read().splitlines()
  sources = encode_sources(vocab, lines, translator.limit, warn=lambda _: None)
  order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
  batches = [[sources[i] for i in order[s:s + args.batch]] for s in range(0, len(order), args.batch)]

  def run():
    for batch in batches:
      translator.translate_ids(batch)
  what = (f"{args.model_dir}: {len(lines)} lines of {args.lines}, batches of {args.batch}, "
          f"beam {decode.beam_size}, alpha {decode.alpha}")
  return run, what


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--shape", choices=sorted(benchmarking.SHAPES), default="base")
  parser.add_argument("--beam", type=int, help="beam size (1: greedy); default 4, or the "
                      "problem's with --model_dir")
  parser.add_argument("--model_dir", help="a trained model directory (with --lines)")
  parser.add_argument("--lines", help="source lines to translate (with --model_dir)")
  parser.add_argument("--batch", type=int, default=64)
  parser.add_argument("--length", type=int, default=30, help="source and output tokens")
  parser.add_argument("--searches", type=int, default=2, help="searches profiled")
  parser.add_argument("--kinds", type=int, default=25, help="thunk kinds printed")
  parser.add_argument("--top", type=int, default=0, help="also print the N longest single thunks")
  parser.add_argument("--json", help="write every thunk's (ms, count) here")
  args = parser.parse_args()
  if min(args.beam or 1, args.batch, args.length, args.searches) < 1:
    parser.error("--beam, --batch, --length and --searches must be >= 1")
  if bool(args.model_dir) != bool(args.lines):
    parser.error("--model_dir and --lines go together: a trained model and the lines it translates")
  run, what = (real_lines(args) if args.model_dir else fixed_work(args))
  for _ in range(2):  # compile, then warm
    run()
  times, wall = profile(run, args.searches)
  print(cpu.describe())
  print(f"{what}; {args.searches} passes profiled, {wall:.0f} ms each (wall, under the profiler)")
  print_thunk_profile(times, args.searches, args.kinds, args.top, args.json)


if __name__ == "__main__":
  main()
