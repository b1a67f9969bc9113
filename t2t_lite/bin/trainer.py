"""t2t-lite-trainer: train a Transformer on a problem (T2T's t2t-trainer flags).

    t2t-lite-trainer --problem=translate_ende --hparams=big --output_dir=runs/big
"""

import sys

from t2t_lite.bin import common


def main(argv=None):
  p = common.parser(__doc__)
  common.add_problem_flags(p)
  p.add_argument("--hparams", default="",
                 help="hparams set name or alias, optionally with overrides: big,dropout=0.1; "
                      "with --hparams_set, only overrides: a=1,b=2")
  p.add_argument("--hparams_set", default=None, help="T2T spelling: the set name")
  p.add_argument("--model", default="transformer",
                 help="registered model (t2t_lite.registry.models; built from the hparams and "
                      "recorded in OUTPUT_DIR/hparams.json)")
  p.add_argument("--output_dir", required="--registry_help" not in (argv or sys.argv),
                 help="model directory: hparams.json, checkpoints, TensorBoard logs")
  p.add_argument("--overwrite_output_dir", action="store_true",
                 help="delete what --output_dir holds and start over")
  p.add_argument("--train_steps", type=int, default=100000, help="total optimizer updates")
  p.add_argument("--eval_steps", type=int, default=100, help="dev batches per evaluation (0: none)")
  p.add_argument("--eval_every", type=int, default=None,
                 help="updates between evaluations (default: --save_checkpoints_steps)")
  p.add_argument("--no_eval_bleu", action="store_true", help="skip the dev BLEU by decoding")
  p.add_argument("--save_checkpoints_steps", type=int, default=1000)
  p.add_argument("--train_minutes", type=float, default=None,
                 help="wall-clock budget of this run: stop (saving a checkpoint) after it")
  p.add_argument("--keep_checkpoint_max", type=int, default=20)
  p.add_argument("--log_every", type=int, default=100)
  p.add_argument("--worker_gpu", type=int, default=None,
                 help="GPUs on this machine (default: all visible; 1: a single device)")
  p.add_argument("--tpu", default=None, help="TPU name or address: use TPUStrategy")
  p.add_argument("--export", action="store_true",
                 help="export a SavedModel to OUTPUT_DIR/export at the end of training")
  args = p.parse_args(argv)

  with common.usage_errors():
    common.load_usr_dir(args)
    if args.registry_help:
      common.print_registry()
      return 0
    from t2t_lite import model_dir, registry  # model_dir registers the models
    model = registry.models.canonical(args.model)
    problem = common.get_problem(args)
    hparams = common.resolve_hparams(args.hparams, args.hparams_set)
    if not args.overwrite_output_dir:  # a run in a model directory (resuming, or fine-tuning an
      # imported model) keeps its vocabulary and, without --hparams, its recorded hparams
      problem = model_dir.with_saved_vocab(problem, args.output_dir)
      if not (args.hparams or args.hparams_set):
        hparams = model_dir.saved_hparams(args.output_dir) or hparams

  from t2t_lite.decoding import dev_bleu
  from t2t_lite.training import distribute, train_loop
  flags = {k: v for k, v in vars(args).items() if v not in (None, False) and k != "registry_help"}
  with common.usage_errors():
    strategy = distribute.make_strategy(args.worker_gpu, args.tpu)
  evaluate_fn = None  # real BLEU by decoding dev sentences at each evaluation
  if not args.no_eval_bleu and hparams.eval_bleu_examples > 0:
    evaluate_fn = dev_bleu.bleu_evaluation(problem, args.data_dir, hparams.eval_bleu_examples)
  try:
    results = train_loop.train_and_evaluate(
        problem, hparams, args.output_dir, data_dir=args.data_dir, train_steps=args.train_steps,
        eval_steps=args.eval_steps, save_checkpoints_steps=args.save_checkpoints_steps,
        keep_checkpoint_max=args.keep_checkpoint_max, eval_every=args.eval_every,
        log_every=args.log_every, strategy=strategy, flags=flags,
        overwrite=args.overwrite_output_dir, evaluate_fn=evaluate_fn,
        max_train_seconds=args.train_minutes * 60 if args.train_minutes else None, model=model)
  except model_dir.ModelDirError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  except train_loop.NonFiniteLossError as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  print("done: " + ", ".join(f"{k} {v}" for k, v in results.items()), flush=True)
  if args.export:
    from t2t_lite.export import saved_model
    saved_model.export(args.output_dir, f"{args.output_dir}/export")
  return 0


if __name__ == "__main__":
  sys.exit(main())
