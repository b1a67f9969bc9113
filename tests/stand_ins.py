"""Stand-in commands for tests that run the project's shell scripts: the scripts source
`.venv/bin/activate`, so a folder's `.venv/bin` whose `activate` puts it first on PATH makes
them call the stand-ins instead of the real commands."""

import os
import pathlib


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
