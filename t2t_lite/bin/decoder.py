"""t2t-lite-decoder: translate a file (or stdin) with a trained model directory.

    t2t-lite-decoder --output_dir=runs/base --decode_from_file=newstest2014.en \
        --decode_to_file=out.de --decode_hparams='beam_size=4,alpha=0.6' \
        --decode_reference=newstest2014.de
"""

import sys

from t2t_lite.bin import common


def main(argv=None):
  p = common.parser(__doc__)
  p.add_argument("--output_dir", required=True, help="the trainer's model directory")
  p.add_argument("--problem", default=None,
                 help="optional: checked against the problem the model was trained on")
  p.add_argument("--decode_hparams", default="",
                 help="beam_size, alpha, extra_length, batch_size, return_beams, max_input_size, "
                      "sampling_temperature, top_k")
  p.add_argument("--decode_from_file", default=None, help="input text (default: stdin)")
  p.add_argument("--decode_to_file", default=None, help="output text (default: stdout)")
  p.add_argument("--checkpoint_path", default=None,
                 help="a checkpoint prefix, e.g. an averaged one (default: the latest)")
  p.add_argument("--decode_reference", default=None,
                 help="reference translations: print sacreBLEU and tokenized BLEU after decoding")
  p.add_argument("--t2t_usr_dir", default=None)
  args = p.parse_args(argv)

  from t2t_lite import model_dir
  with common.usage_errors():
    common.load_usr_dir(args)
    problem_name, _ = model_dir.read_model_dir(args.output_dir)
    if args.problem and args.problem != problem_name:
      raise common.UsageError(f"--problem={args.problem} but {args.output_dir} was trained on "
                              f"{problem_name}; drop --problem or point --output_dir elsewhere")
    problem = model_dir.find_problem(problem_name)
    decode_hparams = model_dir.decode_defaults(problem).parse(args.decode_hparams)
  from t2t_lite.decoding import decode_files
  try:
    outputs = decode_files.decode_file(args.output_dir, decode_hparams, args.decode_from_file,
                                       args.decode_to_file, args.checkpoint_path)
  except (model_dir.ModelDirError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if args.decode_reference:
    from t2t_lite.decoding import bleu_score
    references = decode_files.read_lines(args.decode_reference)
    hyps = [o.split("\t")[0] for o in outputs]
    target_language = problem.target_language if problem else "de"
    print(bleu_score.bleu_report(hyps, references, target_language), file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())
