"""t2t-lite-avg-all: average every window of N consecutive checkpoints (T2T's t2t-avg-all).

    t2t-lite-avg-all --model_dir=runs/base --output_dir=runs/base/avg --n=8 --wait_minutes=30

For each checkpoint with N checkpoints up to it, writes their average as
OUTPUT_DIR/model.ckpt-<step>, so the decoder (or t2t-lite-bleu over each checkpoint's
translation) can follow how averaged models improve; with --wait_minutes it keeps watching a
training run for new checkpoints. OUTPUT_DIR is a model directory (hparams.json and vocabulary
copied). Only the checkpoints the trainer keeps (--keep_checkpoint_max) can be averaged.
"""

import os
import sys

from t2t_lite.bin import common


def build_parser():
  p = common.parser(__doc__)
  p.add_argument("--model_dir", required=True, help="the trainer's model directory")
  p.add_argument("--output_dir", default="avg/", help="where the averaged checkpoints go")
  p.add_argument("--n", type=int, default=8, help="how many checkpoints each average takes")
  p.add_argument("--min_steps", type=int, default=0, help="ignore checkpoints with fewer steps")
  p.add_argument("--wait_minutes", type=float, default=0,
                 help="wait up to this long for a new checkpoint before stopping")
  return p


def main(argv=None):
  args = common.parse_args(build_parser(), argv)
  from t2t_lite import model_dir
  from t2t_lite.training import average
  with common.usage_errors():
    if args.n < 1:
      raise common.UsageError(f"--n must be >= 1, got {args.n}")
    common.check_paths(dirs=[("--model_dir", args.model_dir), ("--output_dir", args.output_dir)])
    if not args.wait_minutes and not os.path.isdir(args.model_dir):
      raise common.UsageError(f"--model_dir {args.model_dir} does not exist; give the trainer's "
                              "model directory (--wait_minutes waits for a training to start)")
  try:
    written = average.average_all(args.model_dir, args.output_dir, args.n, args.min_steps,
                                  args.wait_minutes)
  except model_dir.ModelDirError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(f"wrote {len(written)} averaged checkpoints to {args.output_dir}", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
