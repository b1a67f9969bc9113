r"""t2t-lite-decoder: translate a file (or stdin) with a trained model directory (T2T's t2t-decoder).

    t2t-lite-decoder --output_dir=runs/base --decode_from_file=newstest2014.en \
        --decode_to_file=out.de --decode_hparams='beam_size=4,alpha=0.6' \
        --decode_reference=newstest2014.de

T2T's form works as typed (--data_dir --problem --model --hparams_set are checked against the
model directory, whose hparams.json says what the model is). --decode_interactive answers one
line at a time; --score_file scores given `source<TAB>target` pairs. Decode hparams (T2T's):
beam_size, alpha, extra_length (100), batch_size, return_beams, write_beam_scores (T2T's n-best:
text<TAB>score<TAB>text<TAB>score...), max_input_size (<= 0: no limit), num_samples, num_decodes,
delimiter, sampling_temperature, top_k, seed, xla, constrained; t2t_lite's beam_stop (exact:
T2T's bound; finished: stop once beam_size hypotheses have ended, faster, not exact). The search
programs XLA compiles are kept in OUTPUT_DIR/xla_cache (--xla_cache_dir), so the next run loads
them.
"""

import os
import sys

from t2t_lite.bin import common


def build_parser():
  p = common.parser(__doc__)
  p.add_argument("--output_dir", required=True,
                 help="the trainer's model directory, or a .keras file of one (the trainer's "
                      "--export_keras)")
  common.add_recorded_flags(p)
  p.add_argument("--decode_hparams", default="",
                 help="name=value,... over the problem's decode defaults (see above)")
  p.add_argument("--decode_from_file", default=None, help="input text (default: stdin)")
  p.add_argument("--decode_to_file", default=None,
                 help="output text (default: stdout); with --score_file, the scores")
  p.add_argument("--checkpoint_path", default=None,
                 help="a checkpoint prefix, e.g. an averaged one (default: the latest)")
  p.add_argument("--ensemble_dirs", default="",
                 help="DIR[,DIR...]: more model directories (latest checkpoints) decoded together "
                      "with --output_dir's model, their next-token probabilities averaged (an "
                      "ensemble); they must share its vocabulary")
  p.add_argument("--decode_reference", default=None,
                 help="reference translations: print sacreBLEU and tokenized BLEU after decoding")
  common.add_bool(p, "decode_interactive",
                  "load the model once, then translate each stdin line as soon as it is read "
                  "(a line 'q' quits)")
  p.add_argument("--score_file", default=None,
                 help="score each 'source<TAB>target' line: log P(target + EOS | source) over "
                      "GNMT's length penalty with the decode hparams' alpha, i.e. the beam "
                      "search's own score (alpha=0: the log-probability); one %%.6f per line")
  common.add_bool(p, "keep_timestamp",
                  "give --decode_to_file the modification time of the checkpoint's .index file")
  common.add_xla_cache_flag(p)
  common.add_bool(p, "decode_in_memory", "T2T's; accepted: decodes are always kept in memory")
  common.add_t2t_flags(p, "decoder")  # T2T's other flags, last
  return p


def main(argv=None):
  args = common.parse_args(build_parser(), argv)
  keras_file = args.output_dir.endswith(".keras")
  common.configure_xla_cache(args, None if keras_file else args.output_dir)  # before TensorFlow loads
  if keras_file:  # its model as a temporary model directory
    from t2t_lite import model_dir
    if args.checkpoint_path or args.keep_timestamp:
      print("error: a .keras file holds one model: no --checkpoint_path or --keep_timestamp",
            file=sys.stderr)
      return 2
    try:
      with model_dir.keras_model_dir(args.output_dir) as folder:
        args.output_dir = folder
        return decode(args)
    except model_dir.ModelDirError as e:
      print(f"error: {e}", file=sys.stderr)
      return 2
  return decode(args)


def decode(args):
  from t2t_lite import model_dir
  with common.usage_errors():
    problem = common.check_recorded(args, args.output_dir)
    decode_hparams = model_dir.decode_defaults(problem).parse(args.decode_hparams)
    if args.score_file and args.decode_interactive:
      raise common.UsageError("give --score_file or --decode_interactive, not both")
    ensemble = tuple(d for d in args.ensemble_dirs.split(",") if d)
    if ensemble and args.score_file:
      raise common.UsageError("--score_file scores with one model: no --ensemble_dirs")
    for other in ensemble:
      if not os.path.isdir(other):
        raise common.UsageError(f"--ensemble_dirs: {other} is not a model directory")
    common.check_paths(files=[("--decode_from_file", args.decode_from_file),
                              ("--score_file", args.score_file),
                              ("--decode_to_file", args.decode_to_file)])
  from t2t_lite.decoding import decode_files
  try:
    if args.score_file:
      decode_files.score_file(args.output_dir, decode_hparams, args.score_file,
                              args.decode_to_file, args.checkpoint_path)
      return 0
    if args.decode_interactive:
      decode_files.decode_interactively(args.output_dir, decode_hparams, args.checkpoint_path,
                                        ensemble=ensemble)
      return 0
    outputs = decode_files.decode_file(args.output_dir, decode_hparams, args.decode_from_file,
                                       args.decode_to_file, args.checkpoint_path,
                                       ensemble=ensemble)
  except (ValueError, FileNotFoundError) as e:  # ModelDirError is a ValueError
    print(f"error: {e}", file=sys.stderr)
    return 2
  if args.keep_timestamp and args.decode_to_file:
    import tensorflow as tf
    index = (args.checkpoint_path or tf.train.latest_checkpoint(args.output_dir)) + ".index"
    os.utime(args.decode_to_file, (os.path.getmtime(index),) * 2)
  if args.decode_reference:
    from t2t_lite.decoding import bleu_score
    references = decode_files.read_lines(args.decode_reference)
    hyps = [o.split("\t")[0] for o in outputs[:len(references)]]
    target_language = problem.target_language if problem else "de"
    print(bleu_score.bleu_report(hyps, references, target_language), file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())
