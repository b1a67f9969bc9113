"""t2t-lite-import: another toolkit's trained model -> a t2t_lite model directory.

    t2t-lite-import --from=marian --source=opus-mt-en-de --output_dir=runs/opus-mt-en-de

`--source` is a Marian (OPUS-MT) model folder: Hugging Face's layout (config.json,
model.safetensors, vocab.json, source.spm, target.spm) or Marian's release (*.npz, *.vocab.yml,
source.spm, target.spm). The output directory is read by every other command unchanged.
"""

import sys

from t2t_lite.bin import common


def build_parser():
  p = common.parser(__doc__)
  p.add_argument("--from", dest="source_format", default="marian", choices=["marian"],
                 help="the toolkit that trained the model")
  p.add_argument("--source", required=True, help="the downloaded model's folder")
  p.add_argument("--output_dir", required=True, help="the t2t_lite model directory to write")
  p.add_argument("--hparams", default="",
                 help="overrides of the model's hparams: training settings for fine-tuning, "
                      "dropout, position_encoding=sinusoid (Marian's own sinusoid)")
  p.add_argument("--problem", default="",
                 help="a registered problem to record: its decoding defaults, and the data that "
                      "rerunning t2t-lite-trainer in OUTPUT_DIR fine-tunes on")
  common.add_usr_dir_flag(p)
  common.add_bool(p, "overwrite_output_dir", "replace what --output_dir holds")
  return p


def main(argv=None):
  p = build_parser()
  args = p.parse_args(argv)

  with common.usage_errors():
    common.load_usr_dir(args)
    if args.problem:
      from t2t_lite.problems import get_problem
      args.problem = get_problem(args.problem).name
  from t2t_lite import model_dir
  from t2t_lite.importers import arrays, marian
  try:
    result = marian.import_marian(args.source, args.output_dir, args.hparams, args.problem,
                                  args.overwrite_output_dir)
  except (marian.CheckpointImportError, arrays.WeightFileError, model_dir.ModelDirError,
          ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(f"imported {args.source} into {result['checkpoint']} ({result['vocab_size']} ids)", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
