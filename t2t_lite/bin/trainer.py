r"""t2t-lite-trainer: train a Transformer on a problem (T2T's t2t-trainer flags).

    t2t-lite-trainer --problem=translate_ende --hparams=big --output_dir=runs/big
    t2t-lite-trainer --data_dir=~/t2t_data --problem=translate_ende_wmt32k --model=transformer \
        --hparams_set=transformer_base_single_gpu --output_dir=runs/base   # T2T's spelling

Flag names, defaults and meanings are T2T's (utils/flags.py, bin/t2t_trainer.py); where one
means something else here, its help says what it does here.
"""

import json
import os
import sys

from t2t_lite.bin import common

SCHEDULES = {  # T2T's --schedule values that exist here -> what runs
    "continuous_train_and_eval": "train, evaluating every --local_eval_frequency steps",
    "train_and_evaluate": "the same as continuous_train_and_eval",
    "train": "train only, no evaluation",
    "evaluate": "evaluate the newest checkpoint once",
    "continuous_eval": "evaluate every new checkpoint until one reaches --train_steps (or none "
                       "comes for --eval_timeout_mins): beside a --schedule=train process",
    "evaluate_on_train_data": "evaluate the newest checkpoint on training data",
    "continuous_eval_on_train_data": "continuous_eval on training data",
}
EVAL_SCHEDULES = ("evaluate", "continuous_eval", "evaluate_on_train_data",
                  "continuous_eval_on_train_data")


def build_parser(argv=None):
  p = common.parser(__doc__)
  common.add_problem_flags(p)
  p.add_argument("--hparams", default="",
                 help="hparams set name or alias, optionally with overrides: big,dropout=0.1; "
                      "with --hparams_set, only overrides: a=1,b=2 (T2T's hparam names work)")
  p.add_argument("--hparams_set", default=None, help="T2T's spelling: the set name")
  p.add_argument("--model", default="transformer",
                 help="registered model (t2t_lite.registry.models; built from the hparams and "
                      "recorded in OUTPUT_DIR/hparams.json)")
  p.add_argument("--output_dir", required="--registry_help" not in (argv or sys.argv),
                 help="model directory: hparams.json, checkpoints, TensorBoard logs")
  common.add_bool(p, "overwrite_output_dir", "delete what --output_dir holds and start over")
  p.add_argument("--schedule", default="continuous_train_and_eval", choices=sorted(SCHEDULES),
                 help="what to run: " + "; ".join(f"{k}: {v}" for k, v in SCHEDULES.items()))
  p.add_argument("--train_steps", type=int, default=250000, help="total optimizer updates")
  p.add_argument("--eval_steps", type=int, default=100, help="dev batches per evaluation (0: none)")
  p.add_argument("--local_eval_frequency", type=int, default=1000,
                 help="save a checkpoint and evaluate every N updates (T2T)")
  p.add_argument("--save_checkpoints_steps", type=int, default=None,
                 help="updates between checkpoints (default: --local_eval_frequency)")
  p.add_argument("--save_checkpoints_secs", type=int, default=0,
                 help="> 0: checkpoint (and evaluate) every N seconds instead of every N steps")
  p.add_argument("--eval_every", type=int, default=None,
                 help="updates between evaluations (default: at every checkpoint)")
  common.add_bool(p, "eval_use_test_set", "evaluate on the test split instead of dev")
  p.add_argument("--eval_timeout_mins", type=float, default=240,
                 help="continuous_eval: stop when no new checkpoint comes for this long")
  common.add_bool(p, "no_eval_bleu", "skip the dev BLEU by decoding")
  p.add_argument("--decode_hparams", default="",
                 help="the dev BLEU's decoding: name=value,... over the problem's decode "
                      "defaults with beam_size=1 (greedy)")
  p.add_argument("--train_minutes", type=float, default=None,
                 help="wall-clock budget of this run: stop (saving a checkpoint) after it; "
                      "a linear_decay schedule then ends where the budget does")
  p.add_argument("--keep_checkpoint_max", type=int, default=20,
                 help="how many recent checkpoints to keep")
  p.add_argument("--keep_checkpoint_every_n_hours", type=float, default=10000,
                 help="also keep one checkpoint per N hours of training (the default 10,000 "
                      "effectively disables it, as in T2T)")
  p.add_argument("--log_every", "--log_step_count_steps", dest="log_every", type=int, default=100,
                 help="updates between progress lines (T2T: --log_step_count_steps)")
  p.add_argument("--random_seed", type=int, default=None,
                 help="seed of data shuffling, initialization and dropout: sets the hparam seed "
                      "(recorded in hparams.json)")
  common.add_bool(p, "xla_compile", "compile training steps with XLA (sets the hparam "
                                    "xla_compile=true; --noxla_compile: false; without either, "
                                    "the hparams' value, which may be auto)", default=None)
  common.add_bool(p, "generate_data", "write the problem's vocabulary and token shards before "
                                      "training (what t2t-lite-datagen does)")
  p.add_argument("--worker_gpu", type=int, default=1,
                 help="GPUs on this machine: 1 is one device (T2T's default); N > 1 mirrors over "
                      "N GPUs; 0 uses every visible GPU")
  p.add_argument("--worker_replicas", type=int, default=1,
                 help="machines training together; > 1 needs TF_CONFIG naming them "
                      "(MultiWorkerMirroredStrategy, synchronous: T2T's were asynchronous)")
  p.add_argument("--worker_id", type=int, default=0,
                 help="this machine's index among --worker_replicas (TF_CONFIG's task index)")
  p.add_argument("--inter_op_parallelism_threads", type=int, default=0,
                 help="TensorFlow threads between ops on the CPU (0: TensorFlow's choice)")
  p.add_argument("--intra_op_parallelism_threads", type=int, default=0,
                 help="TensorFlow threads within an op on the CPU (0: TensorFlow's choice)")
  common.add_bool(p, "use_tpu", "train on a TPU (TPUStrategy) named by --tpu, --master or "
                                "--cloud_tpu_name")
  p.add_argument("--tpu", default=None, help="TPU name or address: use TPUStrategy")
  p.add_argument("--master", default="", help="with --use_tpu: the TPU's address (T2T)")
  p.add_argument("--cloud_tpu_name", default=f"{os.environ.get('USER', 'user')}-tpu",
                 help="with --use_tpu: the Cloud TPU's name (T2T's default: $USER-tpu)")
  common.add_bool(p, "export", "export a SavedModel to OUTPUT_DIR/export at the end of training: "
                              "of OUTPUT_DIR/best when evaluations kept one (T2T's BestExporter), "
                              "else of the last checkpoint")
  common.add_bool(p, "export_keras", "also save OUTPUT_DIR/model.keras (the native Keras format, "
                                    "with the hparams and vocabulary inside; of the best "
                                    "checkpoint when there is one): keras.saving.load_model "
                                    "loads it, t2t-lite-decoder --output_dir takes it")
  p.add_argument("--eval_early_stopping_metric", default=None,
                 help="the evaluation metric that picks OUTPUT_DIR/best and drives early stopping: "
                      "bleu, loss, nll or perplexity (default: bleu when dev BLEU is decoded, "
                      "else loss; T2T's default was loss)")
  common.add_bool(p, "eval_early_stopping_metric_minimize",
                  "smaller is better (default: false for bleu, true for the losses)", default=None)
  p.add_argument("--eval_early_stopping_steps", type=int, default=None,
                 help="stop when the metric has not improved for this many updates (T2T; "
                      "default: never stop early, but still keep OUTPUT_DIR/best)")
  p.add_argument("--eval_early_stopping_metric_delta", type=float, default=0.1,
                 help="the patience counts only improvements larger than this (T2T); "
                      "OUTPUT_DIR/best takes any improvement")
  p.add_argument("--warm_start_from", default=None,
                 help="start a new --output_dir from another model's weights (T2T): its model "
                      "directory (latest checkpoint) or a checkpoint prefix; the run takes that "
                      "model's vocabulary, architecture and (without --hparams) hparams; "
                      "--hparams=name=value,... changes training settings only. Ignored once "
                      "--output_dir has checkpoints (rerunning resumes)")
  common.add_bool(p, "warm_start_keep_optimizer",
                  "with --warm_start_from: also restore the source's optimizer state (Adam's "
                  "moments) instead of a fresh one")
  common.add_bool(p, "warm_start_keep_step",
                  "with --warm_start_from: continue the source's update count and so its "
                  "learning-rate schedule (default: restart at step 0 with a new warmup)")
  common.add_t2t_flags(p, "trainer")  # T2T's other flags, last
  return p


def check_workers(worker_replicas, worker_id):
  """T2T's --worker_replicas/--worker_id against TF_CONFIG, which says who the workers are."""
  if worker_replicas <= 1 and worker_id == 0:
    return
  config = json.loads(os.environ.get("TF_CONFIG", "{}") or "{}")
  cluster = config.get("cluster", {})
  workers = len(cluster.get("worker", [])) + len(cluster.get("chief", []))
  if workers != worker_replicas:
    raise common.UsageError(
        f"--worker_replicas={worker_replicas} but TF_CONFIG names {workers} workers; set "
        "TF_CONFIG on every machine to the cluster and its own task index (docs/training.md, 'Devices')")
  index = config.get("task", {}).get("index", 0)
  if config.get("task", {}).get("type") == "worker" and "chief" in cluster:
    index += 1
  if index != worker_id:
    raise common.UsageError(f"--worker_id={worker_id} but TF_CONFIG's task is worker {index}")


def warm_start_settings(args, model, problem, hparams):
  """(model, problem, hparams, WarmStart) of --warm_start_from: the source's model and
  vocabulary; its hparams, or those given with only training settings changed."""
  from t2t_lite import model_dir
  from t2t_lite.problems import VocabProblem
  source_dir, checkpoint = model_dir.warm_start_source(args.warm_start_from)
  first = (args.hparams or "").split(",", 1)[0]
  if args.hparams_set or (first and "=" not in first):  # a whole set: its architecture is checked
    given = hparams
  else:  # overrides only: over the source's hparams
    given = model_dir.read_model_dir(source_dir)[1].parse(args.hparams or "")
  hparams, model_name, vocab = model_dir.warm_start_settings(  # --overwrite_output_dir: emptied
      source_dir, None if args.overwrite_output_dir else args.output_dir, given,
      None if args.model == "transformer" else model)
  return (model_name, VocabProblem(problem, vocab), hparams,
          model_dir.WarmStart(checkpoint, args.warm_start_keep_optimizer, args.warm_start_keep_step))


def main(argv=None):
  args = common.parse_args(build_parser(argv), argv)

  with common.usage_errors():
    common.load_usr_dir(args)
    if args.registry_help:
      common.print_registry()
      return 0
    from t2t_lite import model_dir, registry  # model_dir registers the models
    model = registry.models.canonical(args.model)
    problem = common.get_problem(args)
    hparams = common.resolve_hparams(args.hparams, args.hparams_set)
    warm_start = None
    if args.warm_start_from:  # the source's vocabulary, model and (unless given) hparams
      model, problem, hparams, warm_start = warm_start_settings(args, model, problem, hparams)
    elif not args.overwrite_output_dir:  # a run in a model directory (resuming, or fine-tuning
      # an imported model) keeps its vocabulary and, without --hparams, its recorded hparams
      problem = model_dir.with_saved_vocab(problem, args.output_dir)
      if not (args.hparams or args.hparams_set):
        hparams = model_dir.saved_hparams(args.output_dir) or hparams
    if args.random_seed is not None:
      hparams = hparams.replace(seed=args.random_seed)
    if args.xla_compile is not None:  # --xla_compile or --noxla_compile
      hparams = hparams.replace(xla_compile=args.xla_compile)
    check_workers(args.worker_replicas, args.worker_id)
    if args.train_steps < 0:
      raise common.UsageError(f"--train_steps must be >= 0 (the update to train up to), got "
                              f"{args.train_steps}")
    common.check_paths(dirs=[("--output_dir", args.output_dir), ("--data_dir", args.data_dir)])
    from t2t_lite.training.best import EarlyStopping
    early_stopping = EarlyStopping(args.eval_early_stopping_metric,
                                   args.eval_early_stopping_metric_minimize,
                                   args.eval_early_stopping_steps, args.eval_early_stopping_metric_delta)
    if args.eval_early_stopping_metric not in (None, "loss", "nll", "perplexity", "bleu"):
      raise common.UsageError(f"--eval_early_stopping_metric={args.eval_early_stopping_metric}: "
                              "use bleu, loss, nll or perplexity")
    decode_hparams = problem.default_decode_hparams().replace(beam_size=1).parse(
        args.decode_hparams)

  import tensorflow as tf
  if args.inter_op_parallelism_threads:
    tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_parallelism_threads)
  if args.intra_op_parallelism_threads:
    tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_parallelism_threads)
  # --random_seed is hparams.seed: the Trainer seeds the weights and dropout, the pipeline the
  # shuffle (tf.random.set_seed here would drop the tokenizer of an already loaded vocabulary).
  from t2t_lite.data.text_files import DataError
  from t2t_lite.decoding import dev_bleu
  from t2t_lite.training import distribute, evaluation, train_loop
  eval_split = "test" if args.eval_use_test_set else "dev"
  evaluate_fn = None  # real BLEU by decoding dev sentences at each evaluation
  if not args.no_eval_bleu and hparams.eval_bleu_examples > 0:
    evaluate_fn = dev_bleu.bleu_evaluation(problem, args.data_dir, hparams.eval_bleu_examples,
                                           decode_hparams, split=eval_split)
  if args.eval_early_stopping_metric == "bleu" and evaluate_fn is None:
    print("error: --eval_early_stopping_metric=bleu needs dev BLEU: drop --no_eval_bleu and keep "
          "the hparam eval_bleu_examples > 0", file=sys.stderr)
    return 2
  try:
    if args.schedule in EVAL_SCHEDULES:
      on_train = args.schedule.endswith("on_train_data")
      evaluation.evaluate_checkpoints(
          problem, args.output_dir, args.data_dir, args.eval_steps,
          split="train" if on_train else eval_split, evaluate_fn=None if on_train else evaluate_fn,
          continuous=args.schedule.startswith("continuous"), train_steps=args.train_steps,
          timeout_minutes=args.eval_timeout_mins, summary_name="eval_train" if on_train else "eval")
      return 0
    if args.generate_data:
      from t2t_lite.data.token_shards import generate_data
      generate_data(problem, args.data_dir)
    tpu = args.tpu or ((args.master or args.cloud_tpu_name) if args.use_tpu else None)
    with common.usage_errors():
      strategy = distribute.make_strategy(args.worker_gpu, tpu)
      distribute.check_supported(strategy, hparams)
      training_only = args.schedule == "train"
    flags = {k: v for k, v in vars(args).items() if v not in (None, False) and k != "registry_help"}
    results = train_loop.train_and_evaluate(
        problem, hparams, args.output_dir, data_dir=args.data_dir, train_steps=args.train_steps,
        eval_steps=0 if training_only else args.eval_steps,
        save_checkpoints_steps=args.save_checkpoints_steps or args.local_eval_frequency,
        keep_checkpoint_max=args.keep_checkpoint_max, eval_every=args.eval_every,
        log_every=args.log_every, strategy=strategy, flags=flags,
        overwrite=args.overwrite_output_dir,
        evaluate_fn=None if training_only else evaluate_fn,
        max_train_seconds=args.train_minutes * 60 if args.train_minutes else None, model=model,
        save_checkpoints_secs=args.save_checkpoints_secs,
        keep_checkpoint_every_n_hours=args.keep_checkpoint_every_n_hours, eval_split=eval_split,
        warm_start=warm_start, early_stopping=early_stopping)
  except (model_dir.ModelDirError, DataError) as e:  # DataError: the raw files, named in it
    print(f"error: {e}", file=sys.stderr)
    return 2
  except train_loop.NonFiniteLossError as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  print("done: " + ", ".join(f"{k} {v}" for k, v in results.items()), flush=True)
  from t2t_lite.training.best import best_dir, read_best  # T2T's BestExporter: the best, if kept
  exported = best_dir(args.output_dir) if read_best(args.output_dir) else args.output_dir
  if args.export:
    from t2t_lite.export import saved_model
    saved_model.export(exported, f"{args.output_dir}/export")
  if args.export_keras:
    print("wrote " + model_dir.save_keras(exported, os.path.join(args.output_dir, "model.keras")))
  return 0


if __name__ == "__main__":
  sys.exit(main())
