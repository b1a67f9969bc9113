"""Stand-in commands for tests that run the project's shell scripts: the scripts source
`.venv/bin/activate`, so a folder's `.venv/bin` whose `activate` puts it first on PATH makes
them call the stand-ins instead of the real commands. A stand-in that starts with `LOG_CALL`
logs its call to the file $CALLS names, which `read_calls` reads back."""

import os
import pathlib

# A stand-in's first line: "<its name> <its arguments>" appended to $CALLS.
LOG_CALL = 'echo "$(basename "$0") $*" >> "$CALLS"\n'


def stand_in_venv(folder: pathlib.Path, commands: dict[str, str]) -> pathlib.Path:
  """FOLDER/.venv/bin with an `activate` putting it first on PATH, and an executable file for
  each of `commands` ({name: its whole text, the #! line included}); returns that bin folder."""
  stubs = folder / ".venv" / "bin"
  stubs.mkdir(parents=True)
  (stubs / "activate").write_text(f'PATH="{stubs}:$PATH"\n')
  for name, text in commands.items():
    (stubs / name).write_text(text)
    os.chmod(stubs / name, 0o755)
  return stubs


def read_calls(log: pathlib.Path, prefix: str = "t2t-lite-") -> dict[str, list[dict[str, str]]]:
  """The calls `LOG_CALL` wrote to LOG: {command, `prefix` removed: [each call's arguments as a
  dict]}, `--name=value` as name: value and any other word (`--flag`, `-m`, a path) as the word
  without its leading dashes: "". An argument given twice in one call fails the test."""
  calls = {}
  for line in log.read_text().splitlines():
    command, *args = line.split(" ")
    flags = dict(a[2:].split("=", 1) if "=" in a else (a.lstrip("-"), "") for a in args)
    assert len(flags) == len(args), line
    calls.setdefault(command.removeprefix(prefix), []).append(flags)
  return calls
