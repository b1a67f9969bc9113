"""Where a training step spends its time: a per-thunk profile of the trainer's own step.

    python scripts/profile_train.py --shape=tiny --batch=64x32           # float32, XLA
    python scripts/profile_train.py --shape=tiny --batch=multi30k        # real 4096-token batches
    python scripts/profile_train.py --shape=tiny --xla=false             # the graph path
    python scripts/profile_train.py --shape=tiny --xla=both              # XLA, then the graph
    python scripts/profile_train.py --shape=tiny --hparams=dropout=0.2,num_hidden_layers=4

The step is `Trainer.train_step` as `bench_train` times it (`t2t_lite` rows): the shape's set
(`bench_train`'s shapes; `--hparams` overrides go on it), random batches of BATCHxLENGTH or the
Multi30k recipe's real batches, `--precision` and `--xla` as given. After warm-up steps (every
batch shape compiled), `--steps` steps run under `tf.profiler` with XLA's CPU thunks traced; it
prints the thread time of the leaf events summed by kind (XLA thunks such as `dot` or a
fusion's name, and on the graph path TensorFlow's ops such as `MatMul`), each with its share and
calls, and the wall time of a step. Thread time sums over the threads, so shares are the useful
figure; run it alone. A dot XLA runs asynchronously beside another shows only its launch (the
loss's gradient products: `dE` beside `dh`, whose event then holds both). `--top=N` and
`--json=F` as in `scripts/profile_decode.py`.
"""

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_xprof_traceme=true").strip()

import argparse  # noqa: E402

from benchmarking import print_thunk_profile, profile, random_batches, target_tokens  # noqa: E402  (before TF)
from bench_train import TRAIN_SHAPES, multi30k_batches, trainer_step  # noqa: E402

from t2t_lite import cpu  # noqa: E402
from t2t_lite.hparams import get_hparams  # noqa: E402


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--shape", choices=sorted(TRAIN_SHAPES), default="tiny")
  parser.add_argument("--hparams", default="", help="overrides on the shape's set")
  parser.add_argument("--batch", default="64x32", help="BATCHxLENGTH (random ids) or multi30k")
  parser.add_argument("--precision", default="float32", choices=["float32", "mixed_bfloat16"])
  parser.add_argument("--xla", default="true", choices=["true", "false", "both"],
                      help="both: the XLA path's profile, then the graph path's, in one process")
  parser.add_argument("--steps", type=int, default=10, help="steps profiled")
  parser.add_argument("--kinds", type=int, default=25, help="kinds printed")
  parser.add_argument("--top", type=int, default=0, help="also print the N longest single events")
  parser.add_argument("--json", help="write every event's (ms, count) here (with --xla=both, "
                                     "F_xla.json and F_graph.json for F.json)")
  args = parser.parse_args()
  if args.steps < 1:
    parser.error("--steps must be >= 1")
  set_name, vocab = TRAIN_SHAPES[args.shape]
  try:
    hp = get_hparams(set_name, args.hparams)
  except ValueError as e:
    parser.error(str(e))
  if args.batch == "multi30k":
    batches = multi30k_batches(hp)
  else:
    try:
      size, length = (int(n) for n in args.batch.split("x"))
    except ValueError:
      parser.error(f"--batch takes BATCHxLENGTH (for example 64x32) or multi30k; got {args.batch!r}")
    batches = random_batches(vocab, size, length)
  print(cpu.describe())
  for xla in ((True, False) if args.xla == "both" else (args.xla == "true",)):
    step = trainer_step(hp, vocab, xla=xla, precision=args.precision)
    calls = [0]

    def run(step=step, calls=calls):
      step(batches[calls[0] % len(batches)]).numpy()
      calls[0] += 1

    for _ in range(max(3, len(batches))):  # compile every batch shape, then warm
      run()
    tokens = sum(target_tokens(batches[(calls[0] + i) % len(batches)]) for i in range(args.steps))
    times, wall = profile(run, args.steps)
    print(f"{set_name}{',' + args.hparams if args.hparams else ''}, batch {args.batch}, "
          f"{args.precision}, {'XLA' if xla else 'graph'}; {args.steps} steps profiled, "
          f"{wall:.1f} ms each (wall, under the profiler), {tokens / args.steps:,.0f} target tokens a step")
    json_path = args.json
    if json_path and args.xla == "both":
      root, extension = os.path.splitext(json_path)
      json_path = f"{root}_{'xla' if xla else 'graph'}{extension}"
    print_thunk_profile(times, args.steps, args.kinds, args.top, json_path)


if __name__ == "__main__":
  main()
