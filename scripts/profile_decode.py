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
import collections  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import benchmarking  # noqa: E402  (before TensorFlow: its environment)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from bench_decode import NoEos  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

from t2t_lite import cpu  # noqa: E402
from t2t_lite import model_dir as model_dir_lib  # noqa: E402
from t2t_lite.decoding.translator import Translator, encode_sources, make_search_fn  # noqa: E402
from t2t_lite.hparams import DecodeHParams  # noqa: E402
from t2t_lite.token_ids import EOS_ID  # noqa: E402

# Events that are not leaf work: the executor and loop/condition thunks that contain others, the
# Python and eager layers around the call, the thread pool's own bookkeeping.
NOT_LEAVES = ("ThunkExecutor", "search", "TFE_", "Eager", "__inference", "CpuExecutable",
              "BlockUntil", "SlinkyThreadPool", "cond", "while", "body")


def thunk_times(logdir):
  """{(plane, line, event name): (ms, count)} of every event in the profile under `logdir`."""
  paths = glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)
  if not paths:
    raise RuntimeError(f"tf.profiler wrote no .xplane.pb under {logdir}")
  space = xplane_pb2.XSpace()
  with open(paths[0], "rb") as f:
    space.ParseFromString(f.read())
  times, counts = collections.Counter(), collections.Counter()
  for plane in space.planes:
    for line in plane.lines:
      for event in line.events:
        key = (plane.name, line.name, plane.event_metadata[event.metadata_id].name)
        times[key] += event.duration_ps / 1e9
        counts[key] += 1
  return {key: (times[key], counts[key]) for key in times}


def by_kind(times):
  """{kind: (ms, count)} of the leaf thunks, a kind being the thunk's name without its number."""
  ms, counts = collections.Counter(), collections.Counter()
  for (_, line, name), (t, n) in times.items():
    if line == "python" or name.startswith(NOT_LEAVES):
      continue
    kind = re.sub(r"\.\d+$", "", name)
    ms[kind] += t
    counts[kind] += n
  return {kind: (ms[kind], counts[kind]) for kind, _ in ms.most_common()}


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
  with tempfile.TemporaryDirectory() as logdir:
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    for _ in range(args.searches):
      run()
    wall = (time.perf_counter() - start) * 1000 / args.searches
    tf.profiler.experimental.stop()
    times = thunk_times(logdir)

  kinds = by_kind(times)
  total = sum(ms for ms, _ in kinds.values())
  print(cpu.describe())
  print(f"{what}; {args.searches} passes profiled, {wall:.0f} ms each (wall, under the profiler)")
  print(f"leaf thunks' thread time: {total:.1f} ms ({total / args.searches:.1f} a pass)")
  print(f"{'ms':>9} {'share':>6} {'calls':>7}  kind")
  for kind, (ms, count) in list(kinds.items())[:args.kinds]:
    print(f"{ms:9.1f} {100 * ms / total:5.1f}% {count:7d}  {kind}")
  if args.top:
    print(f"\nthe {args.top} longest thunks:")
    leaves = [(key, value) for key, value in times.items()
              if key[1] != "python" and not key[2].startswith(NOT_LEAVES)]
    for (_, _, name), (ms, count) in sorted(leaves, key=lambda kv: -kv[1][0])[:args.top]:
      print(f"{ms:9.1f} ms {count:6d}x  {name[:110]}")
  if args.json:
    with open(args.json, "w") as f:
      json.dump({"|".join(key): value for key, value in times.items()}, f)


if __name__ == "__main__":
  main()
