"""t2t-lite-exporter: write a text-in/text-out SavedModel (TF Serving layout DIR/<version>/).

    t2t-lite-exporter --output_dir=runs/base --export_dir=export --decode_hparams='beam_size=4'
"""

import sys

from t2t_lite.bin import common


def main(argv=None):
  p = common.parser(__doc__)
  p.add_argument("--output_dir", required=True, help="the trainer's model directory")
  p.add_argument("--export_dir", required=True, help="the SavedModel goes to EXPORT_DIR/<version>")
  p.add_argument("--decode_hparams", default="",
                 help="overrides of the problem's decode defaults: beam_size, alpha, extra_length, "
                      "max_input_size, constrained")
  p.add_argument("--checkpoint_path", default=None, help="default: the latest checkpoint")
  p.add_argument("--version", default=None, help="numeric version folder (default: a timestamp)")
  args = p.parse_args(argv)
  from t2t_lite import model_dir
  with common.usage_errors():  # (a missing model directory is a ModelDirError, a ValueError)
    problem = model_dir.find_problem(model_dir.read_record(args.output_dir)["problem"])
    decode_hparams = model_dir.decode_defaults(problem).parse(args.decode_hparams)
  from t2t_lite.export import saved_model
  try:
    saved_model.export(args.output_dir, args.export_dir, decode_hparams, args.checkpoint_path,
                       args.version)
  except (model_dir.ModelDirError, FileExistsError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
