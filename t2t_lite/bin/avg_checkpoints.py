r"""t2t-lite-avg-checkpoints: average the last N checkpoints (paper: 5 for base, 20 for big).

    t2t-lite-avg-checkpoints --output_dir=runs/base --num_last_checkpoints=5 --avg_dir=runs/base/avg
    t2t-lite-avg-checkpoints --prefix=runs/base/ --num_last_checkpoints=5 \
        --output_path=runs/base/avg/averaged.ckpt                       # T2T's avg_checkpoints form

The averaged checkpoint is AVG_DIR/averaged-<step> (with --output_path: OUTPUT_PATH-<step>, the
step of the newest checkpoint averaged); its folder becomes a model directory of its own
(hparams.json and the vocabulary copied), so the decoder and exporter take it as --output_dir.
"""

import os
import sys

from t2t_lite.bin import common


def build_parser():
  p = common.parser(__doc__)
  p.add_argument("--output_dir", default=None,
                 help="the trainer's model directory (default: the folder of --prefix)")
  p.add_argument("--num_last_checkpoints", type=int, default=0,
                 help="average the newest N checkpoints (paper: 5 for base, 20 for big); T2T's "
                      "default 0 needs --checkpoints instead")
  p.add_argument("--checkpoints", default=None,
                 help="comma-separated checkpoint prefixes to average instead of the last N "
                      "(each prefixed with --prefix, as in T2T)")
  common.add_bool(p, "end_at_best",
                  "average the N checkpoints ending at OUTPUT_DIR/best (the best evaluation's, "
                  "kept by the trainer) instead of the newest N")
  p.add_argument("--prefix", default="",
                 help="T2T's: prepended to each of --checkpoints; its folder is the model "
                      "directory when --output_dir is not given (e.g. --prefix=runs/base/)")
  p.add_argument("--avg_dir", default=None, help="where to write (default: OUTPUT_DIR/averaged)")
  p.add_argument("--output_path", default=None,
                 help="T2T's: the averaged checkpoint's prefix (the step is appended), instead "
                      "of --avg_dir")
  return p


def main(argv=None):
  args = common.parse_args(build_parser(), argv)
  from t2t_lite import model_dir
  from t2t_lite.training import average
  with common.usage_errors():
    output_dir = args.output_dir or (os.path.dirname(args.prefix) if args.prefix else None)
    if not output_dir:
      raise common.UsageError("give --output_dir (the model directory) or T2T's --prefix")
    if not args.checkpoints and args.num_last_checkpoints < 1:
      raise common.UsageError("give --num_last_checkpoints=N (N >= 1; the paper averages 5 for base, "
                              "20 for big) or --checkpoints=A,B,...")
    if args.avg_dir and args.output_path:
      raise common.UsageError("give --avg_dir or --output_path, not both")
    out_dir, name = (os.path.dirname(os.path.abspath(args.output_path)),
                     os.path.basename(args.output_path)) if args.output_path else (
        args.avg_dir or f"{output_dir.rstrip('/')}/averaged", "averaged")
    checkpoints = ([args.prefix + c.strip() for c in args.checkpoints.split(",") if c.strip()]
                   if args.checkpoints else None)
    common.check_paths(dirs=[("--avg_dir" if args.avg_dir else "--output_path", out_dir)])
    if args.end_at_best and checkpoints:
      raise common.UsageError("give --checkpoints or --end_at_best, not both")
  try:
    if args.end_at_best:
      checkpoints = average.window_ending_at_best(output_dir, args.num_last_checkpoints)
    average.average_checkpoints(output_dir, out_dir, args.num_last_checkpoints, checkpoints,
                                checkpoint_name=name)
  except model_dir.ModelDirError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
