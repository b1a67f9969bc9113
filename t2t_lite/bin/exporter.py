"""t2t-lite-exporter: write a text-in/text-out SavedModel (TF Serving layout DIR/<version>/).

    t2t-lite-exporter --output_dir=runs/base --decode_hparams='beam_size=4'

T2T's form works as typed (`--model --hparams_set --problem --data_dir --output_dir`, checked
against the model directory); the SavedModel goes to EXPORT_DIR/<version>, by default
OUTPUT_DIR/export/<version> (or the folder of --checkpoint_path), as T2T's exporter does.
Signatures: serving_default (text -> translations, scores) and nbest (every beam with its score).

    t2t-lite-exporter --output_dir=runs/base --export_format=ctranslate2 --quantization=int8

writes a CTranslate2 model directory instead (EXPORT_DIR, by default OUTPUT_DIR/ctranslate2, or
OUTPUT_DIR/ctranslate2_int8 etc. for a quantized one), with the SentencePiece models and the
decode settings beside it (docs/ctranslate2.md). What CTranslate2 cannot represent exactly is
refused (exit status 2).
"""

import os
import sys

from t2t_lite.bin import common


def build_parser():
  p = common.parser(__doc__)
  p.add_argument("--output_dir", required=True, help="the trainer's model directory")
  common.add_recorded_flags(p)
  p.add_argument("--export_dir", default=None,
                 help="the SavedModel goes to EXPORT_DIR/<version> (default: "
                      "OUTPUT_DIR/export, or CHECKPOINT_PATH's folder/export)")
  p.add_argument("--decode_hparams", default="",
                 help="overrides of the problem's decode defaults: beam_size, alpha, extra_length, "
                      "max_input_size, constrained")
  p.add_argument("--checkpoint_path", default=None, help="a checkpoint prefix (default: the latest)")
  p.add_argument("--version", default=None,
                 help="numeric version folder (default: a timestamp; SavedModel only)")
  p.add_argument("--export_format", default="saved_model", choices=("saved_model", "ctranslate2"),
                 help="a TensorFlow SavedModel (TF Serving layout) or a CTranslate2 model directory")
  p.add_argument("--quantization", default="float32",
                 help="CTranslate2's weight type: float32, int8, int8_float32 or int16 "
                      "(--export_format=ctranslate2 only)")
  return p


def main(argv=None):
  args = common.parse_args(build_parser(), argv)
  from t2t_lite import model_dir
  with common.usage_errors():  # (a missing model directory is a ModelDirError, a ValueError)
    problem = common.check_recorded(args, args.output_dir)
    decode_hparams = model_dir.decode_defaults(problem).parse(args.decode_hparams)
    common.check_paths(dirs=[("--export_dir", args.export_dir)])
  checkpoint_dir = (os.path.dirname(args.checkpoint_path) if args.checkpoint_path
                    else args.output_dir)
  if args.export_format == "ctranslate2":
    return export_ctranslate2(args, decode_hparams, checkpoint_dir)
  if args.quantization != "float32":
    print("error: --quantization applies to --export_format=ctranslate2", file=sys.stderr)
    return 2
  from t2t_lite.export import saved_model
  try:
    saved_model.export(args.output_dir, args.export_dir or os.path.join(checkpoint_dir, "export"),
                       decode_hparams, args.checkpoint_path, args.version)
  except (model_dir.ModelDirError, saved_model.ExportError, FileExistsError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  return 0


def export_ctranslate2(args, decode_hparams, checkpoint_dir):
  from t2t_lite import model_dir
  from t2t_lite.export import ctranslate2
  if args.version is not None:
    print("error: --version names SavedModel versions; a CTranslate2 model has none (use "
          "--export_dir)", file=sys.stderr)
    return 2
  suffix = "" if args.quantization == "float32" else f"_{args.quantization}"
  try:
    ctranslate2.export(args.output_dir,
                       args.export_dir or os.path.join(checkpoint_dir, "ctranslate2" + suffix),
                       args.quantization, decode_hparams, args.checkpoint_path)
  except (model_dir.ModelDirError, ctranslate2.ExportError, FileExistsError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
