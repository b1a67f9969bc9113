"""t2t-lite-avg-checkpoints: average the last N checkpoints (paper: 5 for base, 20 for big).

    t2t-lite-avg-checkpoints --output_dir=runs/base --num_last_checkpoints=5 --avg_dir=runs/base/avg
"""

import sys

from t2t_lite.bin import common


def main(argv=None):
  p = common.parser(__doc__)
  p.add_argument("--output_dir", required=True, help="the trainer's model directory")
  p.add_argument("--num_last_checkpoints", type=int, default=5)
  p.add_argument("--checkpoints", default=None,
                 help="comma-separated checkpoint prefixes to average instead of the last N")
  p.add_argument("--avg_dir", default=None, help="where to write (default: OUTPUT_DIR/averaged)")
  args = p.parse_args(argv)
  from t2t_lite import model_dir
  from t2t_lite.training import average
  try:
    average.average_checkpoints(
        args.output_dir, args.avg_dir or f"{args.output_dir.rstrip('/')}/averaged",
        args.num_last_checkpoints,
        args.checkpoints.split(",") if args.checkpoints else None)
  except model_dir.ModelDirError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
