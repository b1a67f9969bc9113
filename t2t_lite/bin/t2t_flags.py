"""tensor2tensor's trainer and decoder flags that mean nothing here, or something done otherwise.

T2T's commands define every flag of `utils/flags.py` and `bin/t2t_trainer.py` (t2t-trainer), and
those plus `bin/t2t_decoder.py` (t2t-decoder). A T2T command line must work as typed, so each
flag that a command here does not define for real is added by `add` with T2T's name, type and
default and a help line saying what it did in T2T and what to use here:

- accepted (`instead=None`): the flag has no effect here, at any value (T2T's default is what
  this package always does, or the setting has no counterpart that matters, such as a TF1
  session option); a non-default value prints one note on stderr.
- answered (`instead="..."`): T2T's default is accepted silently; any other value asks for
  something this package does another way, so the command stops (exit status 2) with a message
  naming what to use instead.

`add` never replaces a flag the command defines itself: a real implementation wins.
"""

import argparse
import dataclasses
import os
import sys

from t2t_lite.bin import common


@dataclasses.dataclass(frozen=True)
class T2TFlag:
  kind: type          # bool, int, float or str
  default: object     # T2T's default
  t2t: str            # what the flag did in T2T
  here: str           # what it does here, or what to use instead
  instead: bool = False  # True: a non-default value is an error naming `here`


def _accepted(kind, default, t2t, here):
  return T2TFlag(kind, default, t2t, here)


def _answered(kind, default, t2t, here):
  return T2TFlag(kind, default, t2t, here, instead=True)


_PS = "no parameter servers here: training is synchronous all-reduce (several workers: TF_CONFIG)"
_TPU_LOOP = "ignored: TPUStrategy runs the same training steps (--tpu or --use_tpu)"
_NO_SEARCH = ("no hyperparameter search here: run t2t-lite-trainer once per --hparams setting, "
              "each with its own --output_dir")
_CLOUD = "no Cloud ML Engine launcher here: run t2t-lite-trainer on the machines (TF_CONFIG for several)"
_PROFILE = "no built-in profiler here: use TensorFlow's (tf.profiler.experimental) from Python"
_TRAINER_ONLY = "a training flag: t2t-lite-trainer takes it (docs/fine-tuning.md)"

# utils/flags.py and bin/t2t_trainer.py (tensor2tensor at commit bafdc1b6): t2t-trainer's flags.
TRAINER = {
    "registry_help": _accepted(bool, False, "list the registry and exit", "lists problems and hparams sets"),
    "tfdbg": _answered(bool, False, "the TF1 debugger CLI on train/eval",
                       "no TF1 sessions here: use tf.debugging.experimental.enable_dump_debug_info and "
                       "TensorBoard's Debugger V2 from Python"),
    "export_saved_model": _answered(bool, False, "deprecated in T2T (see serving/export.py)",
                                    "use --export, or t2t-lite-exporter after training"),
    "dbgprofile": _answered(bool, False, "record a timeline for chrome://tracing", _PROFILE),
    "hparams_range": _answered(str, None, "a range of hparams for Cloud ML Engine tuning", _NO_SEARCH),
    # Training flags that t2t-lite-trainer defines for real; T2T's decoder shares its flag file.
    "eval_early_stopping_metric": _answered(
        str, "loss", "the metric early stopping watches", _TRAINER_ONLY),
    "eval_early_stopping_metric_delta": _answered(
        float, 0.1, "the change under which the metric has plateaued", _TRAINER_ONLY),
    "eval_early_stopping_steps": _answered(
        int, None, "stop when the metric has not improved for this many steps", _TRAINER_ONLY),
    "eval_early_stopping_metric_minimize": _answered(
        bool, True, "whether the early-stopping metric should go down", _TRAINER_ONLY),
    "warm_start_from": _answered(
        str, None, "initialize from another model's checkpoint", _TRAINER_ONLY),
    "eval_run_autoregressive": _accepted(
        bool, False, "evaluate by decoding instead of teacher forcing",
        "ignored: the trainer's dev BLEU always decodes (eval_bleu_examples); the dev loss is "
        "teacher-forced"),
    "enable_graph_rewriter": _accepted(bool, False, "extra graph optimizations",
                                       "ignored: TensorFlow's Grappler runs by default"),
    "log_device_placement": _answered(bool, False, "log the device of every op",
                                      "use tf.debugging.set_log_device_placement(True) from Python"),
    "eval_throttle_seconds": _accepted(
        int, 600, "the least time between two evaluations",
        "ignored: the trainer evaluates at every checkpoint (--local_eval_frequency, --eval_every); "
        "--schedule=continuous_eval evaluates each new checkpoint"),
    "sync": _accepted(bool, False, "synchronous updates with parameter servers",
                      "ignored: training is always synchronous here"),
    "worker_job": _accepted(str, "/job:localhost", "the name of the worker job",
                            "ignored: TF_CONFIG names the workers"),
    "worker_gpu_memory_fraction": _accepted(
        float, 0.95, "the fraction of GPU memory to allocate",
        "ignored: TensorFlow 2 manages GPU memory; TF_FORCE_GPU_ALLOW_GROWTH=true makes it allocate "
        "only what it needs"),
    "ps_gpu": _answered(int, 0, "GPUs per parameter server", _PS),
    "gpu_order": _answered(str, "", "the order of GPUs for daisy-chaining",
                           "choose and order GPUs with CUDA_VISIBLE_DEVICES"),
    "ps_job": _answered(str, "/job:ps", "the name of the parameter-server job", _PS),
    "ps_replicas": _answered(int, 0, "the number of parameter servers", _PS),
    "decode_from_file": _answered(
        str, "", "a file to decode during continuous evaluation",
        "the trainer's dev BLEU decodes dev sentences at every evaluation; decode a file with "
        "t2t-lite-decoder --decode_from_file"),
    "decode_to_file": _answered(str, "", "where continuous evaluation writes its decodes",
                                "decode a file with t2t-lite-decoder --decode_to_file"),
    "decode_reference": _answered(str, "", "the reference for BLEU of continuous decoding",
                                  "score a decoded file with t2t-lite-bleu --reference"),
    "tpu_num_shards": _accepted(int, 8, "the number of TPU shards", _TPU_LOOP),
    "tpu_job_name": _accepted(str, None, "the TPU job name", "ignored: the TPU cluster resolver finds it"),
    "iterations_per_loop": _accepted(int, 100, "steps per TPU training loop", _TPU_LOOP),
    "use_tpu_estimator": _accepted(bool, False, "use TPUEstimator",
                                   "ignored: no Estimator here; TPUs run under TPUStrategy"),
    "export_saved_model_api_version": _accepted(
        int, 1, "the TPU SavedModel export API version",
        "ignored: t2t-lite-exporter writes a TF2 SavedModel"),
    "use_guarantee_const_getter": _accepted(
        bool, False, "mark weights constant for TPU inference",
        "ignored: t2t-lite-exporter writes a TF2 SavedModel"),
    "xla_jit_level": _answered(int, -1, "the global XLA JIT level of the graph",
                               "use --xla_compile (XLA-compiled training steps)"),
    "tpu_infeed_sleep_secs": _accepted(int, None, "sleep of the TPU infeed thread", _TPU_LOOP),
    "profile": _answered(bool, False, "profile performance", _PROFILE),
    "optionally_use_dist_strat": _accepted(
        bool, False, "use DistributionStrategy instead of T2T's replication",
        "ignored: tf.distribute is always used (--worker_gpu, TF_CONFIG, --tpu)"),
    "std_server_protocol": _accepted(str, "grpc", "the protocol of tf.train.Server",
                                     "ignored: several workers talk gRPC through TF_CONFIG"),
    "cloud_mlengine": _answered(bool, False, "launch on Cloud ML Engine", _CLOUD),
    "cloud_mlengine_master_type": _answered(str, None, "the Cloud ML Engine machine type", _CLOUD),
    "autotune_objective": _answered(str, None, "the metric of Cloud ML Engine tuning", _NO_SEARCH),
    "autotune_maximize": _answered(bool, True, "maximize the tuning objective", _NO_SEARCH),
    "autotune_max_trials": _answered(int, 10, "tuning trials", _NO_SEARCH),
    "autotune_parallel_trials": _answered(int, 1, "tuning trials in parallel", _NO_SEARCH),
    "gpu_automatic_mixed_precision": _answered(
        bool, False, "automatic mixed precision by graph rewrite",
        "use --hparams=mixed_precision=mixed_float16 (GPUs) or mixed_bfloat16"),
}

# bin/t2t_decoder.py's own flags (t2t-decoder also defines all of the above).
DECODER = {
    "decode_shards": _answered(int, 1, "decoding replicas",
                               "split the input and run one t2t-lite-decoder per part"),
    "disable_grappler_optimizations": _accepted(bool, False, "turn Grappler off",
                                                "ignored: the search runs as one compiled graph"),
}

# Trainer flags that mean something else, or something to use instead, on the decoder. Every
# other trainer flag is accepted there and ignored, as in T2T's decoder, which never trains.
DECODER_OVERRIDES = {
    "registry_help": _answered(bool, False, "list the registry and exit",
                               "use t2t-lite-trainer --registry_help"),
    "random_seed": _answered(int, None, "the random seed",
                             "sampling's seed is --decode_hparams=seed=N"),
    "xla_compile": _answered(bool, False, "compile with XLA",
                             "the search is XLA-compiled by default; --decode_hparams=xla=false "
                             "turns it off"),
    "use_tpu": _answered(bool, False, "decode on a TPU",
                         "t2t-lite-decoder runs on CPU or GPU; export a SavedModel (t2t-lite-exporter)"),
    "worker_gpu": _accepted(int, 1, "GPUs to decode on", "ignored: the decoder runs on one device"),
}

# t2t-trainer's flags that t2t-lite-trainer defines for real; T2T's decoder has them too.
TRAINING = {
    "train_steps": (int, 250000, "the number of training steps"),
    "eval_timeout_mins": (int, 240, "the longest wait for a new checkpoint to evaluate"),
    "eval_use_test_set": (bool, False, "evaluate on the test split"),
    "keep_checkpoint_max": (int, 20, "how many recent checkpoints to keep"),
    "keep_checkpoint_every_n_hours": (int, 10000, "keep one checkpoint per this many hours"),
    "save_checkpoints_secs": (int, 0, "save checkpoints every this many seconds"),
    "local_eval_frequency": (int, 1000, "save and evaluate every N steps"),
    "worker_replicas": (int, 1, "how many workers train"),
    "worker_id": (int, 0, "this worker's index"),
    "generate_data": (bool, False, "generate data before training"),
    "tmp_dir": (str, "/tmp/t2t_datagen", "where data generation downloads"),
    "inter_op_parallelism_threads": (int, 0, "TensorFlow's inter-op threads"),
    "intra_op_parallelism_threads": (int, 0, "TensorFlow's intra-op threads"),
    "master": (str, "", "the TensorFlow master's address"),
    "schedule": (str, "continuous_train_and_eval", "what the trainer runs"),
    "eval_steps": (int, 100, "evaluation steps"),
    "cloud_tpu_name": (str, f"{os.getenv('USER')}-tpu", "the Cloud TPU's name"),
    "log_step_count_steps": (int, 100, "log progress every N steps"),
    "worker_gpu": (int, 1, "how many GPUs to use"),
    "random_seed": (int, None, "the random seed"),
    "use_tpu": (bool, False, "use a TPU"),
    "xla_compile": (bool, False, "compile with XLA"),
}

_NOTE_DECODER = "a t2t-trainer flag, which T2T's decoder shares; ignored: decoding does not train"


def flags_for(command):
  """{name: T2TFlag} of T2T's flags for `command` ("trainer" or "decoder")."""
  if command == "trainer":
    return dict(TRAINER)
  if command == "decoder":
    shared = {name: _accepted(flag.kind, flag.default, flag.t2t, _NOTE_DECODER)
              for name, flag in TRAINER.items()}
    shared.update({name: _accepted(kind, default, t2t, _NOTE_DECODER)
                   for name, (kind, default, t2t) in TRAINING.items()})
    return {**shared, **DECODER_OVERRIDES, **DECODER}
  raise ValueError(f"no T2T flag table for {command!r}")


def _parse(kind, text, name):
  try:
    return common.parse_bool(text) if kind is bool else kind(text)
  except (ValueError, argparse.ArgumentTypeError):
    raise argparse.ArgumentTypeError(f"--{name}: expected {kind.__name__}, got {text!r}") from None


class _T2TFlagAction(argparse.Action):
  """Parses T2T's value; stops with the `instead` message, or notes that the flag is ignored."""

  def __init__(self, option_strings, dest, flag=None, negated=False, **kwargs):
    self.flag, self.negated = flag, negated
    super().__init__(option_strings, dest, **kwargs)

  def __call__(self, parser, namespace, values, option_string=None):
    flag, name = self.flag, self.dest
    if self.negated:
      value = False
    elif flag.kind is bool and values is None:
      value = True
    else:
      try:
        value = _parse(flag.kind, values, name)
      except argparse.ArgumentTypeError as e:
        parser.error(str(e))
    setattr(namespace, name, value)
    if value == flag.default or (flag.default is None and value in ("", 0, False)):
      return
    if flag.instead:
      parser.error(f"--{name} ({flag.t2t} in T2T) is not supported: {flag.here}")
    print(f"note: --{name} is T2T's flag ({flag.t2t}); {flag.here}", file=sys.stderr)


def add(parser, command):
  """Adds T2T's flags of `command` that `parser` does not define itself, each with its help."""
  defined = set(parser._option_string_actions)
  for name, flag in flags_for(command).items():
    if f"--{name}" in defined:
      continue
    what = "stops with a message unless T2T's default; " if flag.instead else ""
    help_text = f"T2T's: {flag.t2t}. Here: {what}{flag.here}".replace("%", "%%")
    nargs = "?" if flag.kind is bool else None
    metavar = "BOOL" if flag.kind is bool else flag.kind.__name__.upper()
    parser.add_argument(f"--{name}", action=_T2TFlagAction, flag=flag, nargs=nargs, metavar=metavar,
                        default=flag.default, help=help_text)
    if flag.kind is bool and f"--no{name}" not in defined:
      parser.add_argument(f"--no{name}", dest=name, action=_T2TFlagAction, flag=flag, negated=True,
                          nargs=0, default=flag.default, help=argparse.SUPPRESS)
