"""Every flag of tensor2tensor's t2t-trainer and t2t-decoder (tests/t2t_flag_names.py, read from
T2T's flag files) is accepted by t2t-lite-trainer / t2t-lite-decoder with its help: a real flag,
or one of t2t_lite/bin/t2t_flags.py's table, which either ignores it (a note on stderr) or stops
with exit status 2 and a message naming what to use instead; absl's --noNAME form; the flags
the commands define themselves default to T2T's values; `~` in paths is expanded. Also T2T's
avg_checkpoints default, and every flag's help and default on t2t-lite-parse-eval and
t2t-lite-import."""

import argparse
import os

import pytest
import t2t_flag_names

from t2t_lite.bin import avg_checkpoints, common, decoder, importer, parse_eval, t2t_flags, trainer

COMMANDS = {"trainer": (trainer, t2t_flag_names.TRAINER), "decoder": (decoder, t2t_flag_names.DECODER)}
REQUIRED = ["--output_dir=runs/x"]   # both commands require it


def _other_value(flag):
  """A command-line value that is not T2T's default."""
  if flag.kind is bool:
    return "false" if flag.default else "true"
  if flag.kind is int:
    return "3" if flag.default is None else str(flag.default + 2)
  if flag.kind is float:
    return "0.5" if flag.default is None else str(flag.default / 2)
  return "elsewhere"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_t2t_flag_is_defined_with_help(command):
  module, names = COMMANDS[command]
  parser = module.build_parser()
  help_text = parser.format_help()
  assert len(names) >= 70
  for name in names:
    action = parser._option_string_actions.get(f"--{name}")
    assert action is not None, f"t2t-lite-{command} lacks T2T's --{name}"
    assert action.help and action.help != argparse.SUPPRESS, f"--{name} has no help"
    assert f"--{name}" in help_text


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_table_is_t2ts_flags_with_t2ts_defaults(command):
  _, names = COMMANDS[command]
  for name, flag in t2t_flags.flags_for(command).items():
    assert name in names, f"--{name} is not a T2T {command} flag"
    # cloud_tpu_name's default is computed: "%s-tpu" % os.getenv("USER")
    t2t_default = t2t_flag_names.T2T_DEFAULTS.get(name, f"{os.getenv('USER')}-tpu")
    assert flag.default == t2t_default, name
    assert flag.kind is type(flag.default) or flag.default is None, name


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_table_flags_accept_t2ts_default_and_answer_other_values(command, capsys):
  module, _ = COMMANDS[command]
  own = {o for a in _own_parser(module)._actions for o in a.option_strings}
  checked = 0
  for name, flag in t2t_flags.flags_for(command).items():
    if f"--{name}" in own:
      continue   # the command implements it for real
    checked += 1
    if flag.default is not None:
      default = str(flag.default).lower() if flag.kind is bool else str(flag.default)
      args = module.build_parser().parse_args([*REQUIRED, f"--{name}={default}"])
      assert getattr(args, name) == flag.default
      assert capsys.readouterr().err == ""
    argv = [*REQUIRED, f"--{name}={_other_value(flag)}"]
    if flag.instead:
      with pytest.raises(SystemExit) as stop:
        module.build_parser().parse_args(argv)
      assert stop.value.code == 2
      err = capsys.readouterr().err
      assert f"--{name}" in err and flag.here in err
    else:
      module.build_parser().parse_args(argv)
      assert f"note: --{name}" in capsys.readouterr().err
  assert checked >= 10


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_table_booleans_take_absls_no_form(command, capsys):
  """absl's `--noNAME` on each boolean of the table sets it to False, the last form given winning
  (`--NAME --noNAME`: False, as in T2T). Where T2T's default is True (autotune_maximize, the
  decoder's eval_early_stopping_metric_minimize), `--noNAME` is another value: an answered flag
  stops with exit status 2 naming what to use, an accepted one prints its note."""
  module, _ = COMMANDS[command]
  own = {o for a in _own_parser(module)._actions for o in a.option_strings}
  checked = {False: 0, True: 0}
  for name, flag in t2t_flags.flags_for(command).items():
    if flag.kind is not bool or f"--{name}" in own:
      continue
    checked[flag.default] += 1
    if flag.default and flag.instead:
      with pytest.raises(SystemExit) as stop:
        module.build_parser().parse_args([*REQUIRED, f"--no{name}"])
      assert stop.value.code == 2 and flag.here in capsys.readouterr().err, name
      continue
    if flag.default:     # --noNAME is not T2T's default: noted
      argv, noted = [f"--no{name}"], True
    elif flag.instead:   # --NAME would stop
      argv, noted = [f"--no{name}"], False
    else:                # --NAME is noted, then --noNAME wins
      argv, noted = [f"--{name}", f"--no{name}"], True
    assert getattr(module.build_parser().parse_args([*REQUIRED, *argv]), name) is False, name
    assert (f"note: --{name}" in capsys.readouterr().err) == noted, name
  assert checked[False] >= 10 and checked[True] >= 1, checked


# The flags a command defines for real whose default is not T2T's literal one, on purpose (each
# help says what it is instead).
OWN_DEFAULTS = {
    "trainer": {
        "model": "transformer",             # T2T's had none (required); the model registered here
        "data_dir": "t2t_data",             # T2T's had none (required)
        "eval_early_stopping_metric": None,  # bleu when dev BLEU is decoded, else T2T's loss
        "eval_early_stopping_metric_minimize": None,   # follows the metric
        "xla_compile": None,                # the hparams' value (--xla_compile / --noxla_compile)
        "cloud_tpu_name": f"{os.environ.get('USER', 'user')}-tpu",  # T2T's "%s-tpu" % $USER
    },
    "decoder": {},
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_own_flags_have_t2ts_defaults(command):
  """The flags a command implements itself (not the table's, checked above) default to T2T's
  literal value (t2t_flag_names.T2T_DEFAULTS, read from T2T's DEFINE_* calls: train_steps
  250000, eval_steps 100, keep_checkpoint_max 20, eval_timeout_mins 240, ...), or to None where
  T2T's is "" (the same: not given); the few differences on purpose are OWN_DEFAULTS."""
  module, names = COMMANDS[command]
  parser = _own_parser(module)
  checked = 0
  for name in names:
    action = parser._option_string_actions.get(f"--{name}")
    if action is None:
      continue   # the table's
    checked += 1
    if name in OWN_DEFAULTS[command]:
      assert action.default == OWN_DEFAULTS[command][name], name
      continue
    t2t_default = t2t_flag_names.T2T_DEFAULTS[name]
    assert action.default == t2t_default or (action.default is None and t2t_default == ""), \
        (name, action.default, t2t_default)
  assert checked >= {"trainer": 35, "decoder": 15}[command], checked


def test_paths_with_a_tilde_are_expanded(tmp_path, monkeypatch):
  """`--data_dir=~/t2t_data` (T2T's walkthrough) reaches the program unexpanded, since the shell
  expands `~` only at a word's start: the commands expand it, as T2T's did."""
  monkeypatch.setenv("HOME", str(tmp_path))
  args = common.parse_args(trainer.build_parser(), ["--output_dir=~/t2t_train/base",
                                                    "--data_dir=~/t2t_data"])
  assert (args.output_dir, args.data_dir) == (f"{tmp_path}/t2t_train/base", f"{tmp_path}/t2t_data")
  args = common.parse_args(decoder.build_parser(), ["--output_dir=~/m", "--decode_from_file=a~b"])
  assert (args.output_dir, args.decode_from_file) == (f"{tmp_path}/m", "a~b")


def _own_parser(module):
  """The command's parser without the table (its own flags only)."""
  original = t2t_flags.add
  t2t_flags.add = lambda parser, command: None
  try:
    return module.build_parser()
  finally:
    t2t_flags.add = original


def test_the_flags_the_t2t_walkthrough_users_hit(capsys):
  """--worker_gpu_memory_fraction and --sync are accepted; --hparams_range and --ps_replicas
  say what to use instead (they used to exit 2 as unknown flags)."""
  args = trainer.build_parser().parse_args([*REQUIRED, "--worker_gpu_memory_fraction=0.5", "--sync"])
  assert args.worker_gpu_memory_fraction == 0.5 and args.sync is True
  err = capsys.readouterr().err
  assert "TF_FORCE_GPU_ALLOW_GROWTH" in err and "always synchronous" in err
  for argv, instead in ((["--hparams_range=x"], "once per --hparams"), (["--ps_replicas=2"], "TF_CONFIG")):
    with pytest.raises(SystemExit) as stop:
      trainer.build_parser().parse_args([*REQUIRED, *argv])
    assert stop.value.code == 2 and instead in capsys.readouterr().err
  assert trainer.build_parser().parse_args([*REQUIRED, "--nosync"]).sync is False


def test_avg_checkpoints_num_last_default_is_t2ts(tmp_path, capsys):
  """T2T's avg_checkpoints.py: --num_last_checkpoints defaults to 0, which needs --checkpoints."""
  assert avg_checkpoints.build_parser().get_default("num_last_checkpoints") == 0
  with pytest.raises(SystemExit) as stop:
    avg_checkpoints.main([f"--output_dir={tmp_path}"])
  assert stop.value.code == 2 and "--num_last_checkpoints=N" in capsys.readouterr().err


@pytest.mark.parametrize("command", [parse_eval, importer])
def test_every_flag_has_help_and_its_default(command):
  parser = command.build_parser()
  for action in parser._actions:
    if action.help == argparse.SUPPRESS or action.dest == "help":
      continue
    assert action.help, f"{action.option_strings} has no help"
    formatted = parser.formatter_class("x")._get_help_string(action)
    assert "(default" in formatted, f"{action.option_strings} does not show its default"
