"""What the commands share: flag definitions for problems/hparams, and errors as exit status 2.

The library never parses flags; only the modules in `t2t_lite/bin` do, through these helpers.
"""

import argparse
import contextlib
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


def add_problem_flags(parser):
  parser.add_argument("--problem", help="registered problem name (see --registry_help)")
  parser.add_argument("--data_dir", default="t2t_data",
                      help="where the problem keeps its vocabulary and prepared data")
  parser.add_argument("--raw_data_dir", default=None,
                      help="read the problem's parallel text from local files in this directory "
                           "instead of downloading (see README, 'Data')")
  parser.add_argument("--t2t_usr_dir", default=None,
                      help="a Python module or package directory that registers your own problems "
                           "or hparams sets")
  parser.add_argument("--registry_help", action="store_true", help="list problems and hparams sets")


def load_usr_dir(args):
  if args.t2t_usr_dir:
    from t2t_lite.problems import import_usr_dir
    import_usr_dir(args.t2t_usr_dir)


def print_registry():
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


def parser(description):
  return argparse.ArgumentParser(description=description,
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
