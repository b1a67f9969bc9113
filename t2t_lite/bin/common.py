"""What the commands share: T2T's flag definitions, and errors as exit status 2.

The library never parses flags; only the modules in `t2t_lite/bin` do, through these helpers.
Flag names, defaults and meanings are tensor2tensor's (utils/flags.py, bin/t2t_trainer.py,
bin/t2t_decoder.py); boolean flags take T2T's (absl's) forms too: `--flag`, `--flag=false`,
`--noflag`.
"""

import argparse
import contextlib
import dataclasses
import os
import sys

from t2t_lite import registry


class UsageError(Exception):
  """Bad command-line input: printed without a traceback, exit status 2."""


@contextlib.contextmanager
def usage_errors():
  """Turns registry and value errors raised while resolving flags into exit status 2."""
  try:
    yield
  except (registry.RegistryError, ValueError, UsageError) as e:
    print(f"error: {e}", file=sys.stderr)
    raise SystemExit(2) from None


def check_paths(files=(), dirs=()):
  """Refuses, before any work, a flag naming a path of the wrong kind: `files` and `dirs` are
  (flag, path) pairs of files read or written and of directories written (None: not given)."""
  for flag, path in files:
    if path and os.path.isdir(path):
      raise UsageError(f"{flag} {path} is a directory; give a file")
  for flag, path in dirs:
    if path and os.path.exists(path) and not os.path.isdir(path):
      raise UsageError(f"{flag} {path} is a file; give a directory")


def parse_bool(text):
  """T2T's (absl's) boolean values: true/false, 1/0, yes/no, t/f, y/n."""
  lowered = str(text).strip().lower()
  if lowered in ("true", "1", "yes", "t", "y"):
    return True
  if lowered in ("false", "0", "no", "f", "n"):
    return False
  raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


_bool = parse_bool   # (its earlier name)


def add_bool(parser, name, help, default=False):
  """A boolean flag in T2T's (absl's) forms: `--name`, `--name=true|false`, `--noname`."""
  parser.add_argument(f"--{name}", nargs="?", const=True, default=default, type=parse_bool,
                      metavar="BOOL", help=help)
  parser.add_argument(f"--no{name}", dest=name, action="store_false", help=argparse.SUPPRESS)


def add_problem_flags(parser):
  parser.add_argument("--problem", help="registered problem name (see --registry_help)")
  parser.add_argument("--data_dir", default="t2t_data",
                      help="where the problem keeps its vocabulary and prepared data")
  parser.add_argument("--raw_data_dir", default=None,
                      help="read the problem's parallel text from local files in this directory "
                           "instead of downloading (see docs/data.md)")
  add_tmp_dir_flag(parser)
  add_usr_dir_flag(parser)
  add_bool(parser, "registry_help", "list problems and hparams sets, then exit")


def add_usr_dir_flag(parser):
  parser.add_argument("--t2t_usr_dir", default=None,
                      help="a Python module or package directory that registers your own problems "
                           "or hparams sets")


def add_tmp_dir_flag(parser):
  parser.add_argument("--tmp_dir", default="/tmp/t2t_datagen",
                      help="T2T's folder for raw downloads; accepted and not used: downloads are "
                           "kept under --data_dir (TFDS in DATA_DIR/tfds/downloads, Multi30k in "
                           "DATA_DIR/multi30k), so later runs find them; --raw_data_dir reads "
                           "local files")


def add_recorded_flags(parser):
  """T2T's naming flags on the commands that read a model directory (decoder, exporter). What
  the model is comes from OUTPUT_DIR/hparams.json (so overrides are never lost, T2T #672); these
  are checked against it (`check_recorded`)."""
  parser.add_argument("--problem", default=None,
                      help="checked against the problem the model was trained on")
  parser.add_argument("--model", default=None,
                      help="checked against the model recorded in OUTPUT_DIR/hparams.json")
  parser.add_argument("--hparams_set", default=None,
                      help="checked against the recorded hparams (they are used; a difference "
                           "is a warning, as T2T's hparams.json overrides the set)")
  parser.add_argument("--hparams", default="",
                      help="checked against the recorded hparams, like --hparams_set")
  parser.add_argument("--data_dir", default=None,
                      help="used only to find the vocabulary of a model directory that has no "
                           "vocab.model (the trainer's --data_dir is recorded)")
  add_usr_dir_flag(parser)


XLA_CACHE_ENV = "T2T_LITE_XLA_CACHE_DIR"   # --xla_cache_dir's value when the flag is not given


def add_xla_cache_flag(parser, default_help="OUTPUT_DIR/xla_cache"):
  parser.add_argument("--xla_cache_dir", default=None,
                      help="where the search programs XLA compiles are kept, so that the next run "
                           f"loads them instead of compiling (default: ${XLA_CACHE_ENV}, else "
                           f"{default_help}; 'none': no cache; a TF_XLA_FLAGS naming "
                           "--tf_xla_persistent_cache_directory is left as it is). See "
                           "docs/decoding.md")


def configure_xla_cache(args, output_dir=None):
  """Turns the persistent XLA cache on (`t2t_lite.decoding.xla_cache.configure`) in --xla_cache_dir
  (or $T2T_LITE_XLA_CACHE_DIR), else OUTPUT_DIR/xla_cache when `output_dir` is a folder; before
  TensorFlow is imported. Returns the folder, or None (off)."""
  from t2t_lite.decoding import xla_cache
  given = args.xla_cache_dir if args.xla_cache_dir is not None else os.environ.get(XLA_CACHE_ENV)
  if given is not None and given.strip().lower() in ("", "none"):
    return None
  if not given and not (output_dir and os.path.isdir(output_dir)):
    return None   # no model directory there: its error comes later, and no folder is made
  return xla_cache.configure(os.path.expanduser(given) if given else
                             xla_cache.default_directory(output_dir))


def load_usr_dir(args):
  if args.t2t_usr_dir:
    from t2t_lite.problems import import_usr_dir
    import_usr_dir(args.t2t_usr_dir)


def print_registry():
  """Prints what is registered; a reader that stops early (`| head`) ends it quietly."""
  try:
    _print_registry()
    sys.stdout.flush()
  except BrokenPipeError:
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit


def _print_registry():
  import t2t_lite.hparams  # noqa: F401  registers the sets
  import t2t_lite.problems  # noqa: F401
  print("Problems:")
  for name in registry.problems.names():
    print(f"  {name}")
  for alias, target in sorted(registry.problems.aliases().items()):
    print(f"  {alias} -> {target}")
  print("  (append _rev to any translation problem to swap its direction)")
  print("Hparams sets:")
  for name in registry.hparams_sets.names():
    print(f"  {name}")
  for alias, target in sorted(registry.hparams_sets.aliases().items()):
    print(f"  {alias} -> {target}")


def check_recorded(args, output_dir):
  """Loads --t2t_usr_dir and checks --problem, --model, --hparams_set and --hparams against the
  model directory; returns its problem (None when its registration is not loaded here).

  Raises:
    UsageError: a --problem or --model other than the recorded one.
    registry.RegistryError: an unknown name (its message suggests the closest).
  """
  load_usr_dir(args)
  from t2t_lite import model_dir
  record = model_dir.read_record(output_dir)
  if args.problem:
    from t2t_lite.problems import get_problem as lookup
    if lookup(args.problem).name != record["problem"]:
      raise UsageError(f"--problem={args.problem} but {output_dir} was trained on "
                       f"{record['problem']}; drop --problem or point --output_dir elsewhere")
  recorded_model = record.get("model", model_dir.DEFAULT_MODEL)
  if args.model and registry.models.canonical(args.model) != recorded_model:
    raise UsageError(f"--model={args.model} but {output_dir} holds a {recorded_model}; drop "
                     "--model or point --output_dir elsewhere")
  if args.hparams_set or args.hparams:
    _, recorded = model_dir.read_model_dir(output_dir)
    given = (resolve_hparams(args.hparams, args.hparams_set) if args.hparams_set
             else recorded.parse(args.hparams))
    differences = {f.name: (getattr(recorded, f.name), getattr(given, f.name))
                   for f in dataclasses.fields(recorded)
                   if getattr(recorded, f.name) != getattr(given, f.name)}
    if differences:
      print(f"warning: the model in {output_dir} was trained with other hparams than "
            f"--hparams_set/--hparams give (recorded, given): {differences}; using the recorded "
            "ones", file=sys.stderr)
  return model_dir.find_problem(record["problem"])


def get_problem(args):
  if not args.problem:
    raise UsageError("--problem is required (see --registry_help for the list)")
  from t2t_lite.problems import get_problem as lookup
  return lookup(args.problem, raw_data_dir=args.raw_data_dir)


def resolve_hparams(hparams_arg, hparams_set=None):
  """`--hparams=big,dropout=0.1`, or T2T's `--hparams_set=transformer_big --hparams='a=1'`."""
  from t2t_lite.hparams import get_hparams
  hparams_arg = (hparams_arg or "").strip()
  if hparams_set:
    return get_hparams(hparams_set, hparams_arg)
  first = hparams_arg.split(",", 1)[0]
  if not first or "=" in first:
    return get_hparams("transformer_base", hparams_arg)
  return get_hparams(hparams_arg)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
  """Every flag's help ends with its default (unless the help already says it); the module
  docstring's examples keep their lines."""

  def _get_help_string(self, action):
    if "(default" in (action.help or ""):
      return action.help
    return super()._get_help_string(action)


def parse_args(parser, argv=None):
  """`parser.parse_args(argv)` with `~` expanded in every path-like value, as T2T's commands
  expand --data_dir and --output_dir (`--data_dir=~/t2t_data` reaches the program unexpanded)."""
  args = parser.parse_args(argv)
  for name, value in vars(args).items():
    if isinstance(value, str) and value.startswith("~"):
      setattr(args, name, os.path.expanduser(value))
  return args


def add_t2t_flags(parser, command):
  """T2T's flags of `command` that `parser` does not define (t2t_lite/bin/t2t_flags.py): call it
  last, after the command's own flags."""
  from t2t_lite.bin import t2t_flags
  t2t_flags.add(parser, command)


def parser(description):
  """A command's parser: T2T's help format, and `--verbose` (read before TensorFlow loads, by
  t2t_lite.bin.quiet)."""
  p = argparse.ArgumentParser(description=description, formatter_class=HelpFormatter)
  add_bool(p, "verbose", "show TensorFlow's start-up lines on stderr (oneDNN, CUDA, CPU features), "
           "hidden by default; T2T_LITE_VERBOSE=1 does the same")
  return p
