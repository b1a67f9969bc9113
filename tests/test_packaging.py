"""Packaging: `pip install .` and `pip install -e .` both give t2t_lite.problems / t2t_lite.hparams
from anywhere and every console script of pyproject.toml; the runtime requirements hold no
test-only package; the setup script installs the runtime alone for the quickstart and the test
extra for the tests."""

import importlib.metadata
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

try:
  import tomllib
except ImportError:  # Python 3.10
  import tomli as tomllib

from stand_ins import stand_in_venv

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
  PYPROJECT = tomllib.load(f)
CONSOLE_SCRIPTS = PYPROJECT["project"]["scripts"]
# Packages that only the tests, the benchmarks or the docs need: never a runtime requirement.
NOT_RUNTIME = {"pytest", "pytest-xdist", "ruff", "jax", "jaxlib", "torch", "transformers", "mkdocs",
               "keras-hub", "ctranslate2", "tomli"}


def _name(requirement):
  """The normalized project name of a requirement string (PEP 503)."""
  return re.sub(r"[-_.]+", "-", re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1)).lower()
CHECK = ("import t2t_lite.problems, t2t_lite.hparams, importlib.util, sys; "
         "assert t2t_lite.hparams.get_hparams('big').hidden_size == 1024; "
         "assert 'translate_ende' in t2t_lite.registry.problems; "
         "assert importlib.util.find_spec('problems') is None, 'problems/ leaked as a top-level package'; "
         "assert importlib.util.find_spec('hparams') is None, 'hparams/ leaked as a top-level package'; "
         "print(t2t_lite.__file__)")


def _setuptools_at_least(major):
  try:
    return int(importlib.metadata.version("setuptools").split(".")[0]) >= major
  except importlib.metadata.PackageNotFoundError:
    return False


def test_installed_environment_imports_from_another_directory(tmp_path):
  """The environment running the tests (an editable install in scripts/setup.sh)."""
  result = subprocess.run([sys.executable, "-c", CHECK], cwd=tmp_path, capture_output=True, text=True)
  assert result.returncode == 0, result.stderr


def test_regular_install_maps_problems_and_hparams_into_the_package(tmp_path):
  target = tmp_path / "site"
  # The environment's setuptools builds it when it is new enough for pyproject.toml's
  # build-system requirement (PEP 639 license metadata); else pip fetches one in isolation.
  isolation = ["--no-build-isolation"] if _setuptools_at_least(77) else []
  build = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", *isolation,
                          "--target", str(target), REPO], capture_output=True, text=True, timeout=600)
  assert build.returncode == 0, build.stderr
  assert sorted(p for p in os.listdir(target) if not p.endswith(".dist-info")) == ["bin", "t2t_lite"]
  assert len(CONSOLE_SCRIPTS) >= 10
  for command in CONSOLE_SCRIPTS:
    assert os.path.exists(target / "bin" / command), f"{command} was not installed"
  # Only the fresh copy on the path (not the repository, not the editable install's finder).
  code = f"import sys; sys.path.insert(0, {str(target)!r}); " + CHECK
  result = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True)
  assert result.returncode == 0, result.stderr
  assert result.stdout.strip().startswith(str(target))


def test_test_script_runs_every_pass_and_fails_if_any_failed(tmp_path):
  """scripts/test.sh with stand-ins for setup, ruff and python: a failing TensorFlow pass does
  not skip the JAX pass, and the script's exit status says something failed."""
  (tmp_path / "scripts").mkdir()
  with open(os.path.join(REPO, "scripts", "test.sh"), encoding="utf-8") as f:
    (tmp_path / "scripts" / "test.sh").write_text(f.read())
  (tmp_path / "scripts" / "setup.sh").write_text("exit 0\n")
  log = tmp_path / "calls.log"
  stand_in_venv(tmp_path, {
      "ruff": f'#!/bin/sh\necho "ruff $*" >> "{log}"\n',
      # The TensorFlow pass fails (no KERAS_BACKEND), the JAX pass passes.
      "python": f'#!/bin/sh\necho "python ${{KERAS_BACKEND:-tensorflow}} $*" >> "{log}"\n'
                '[ "$KERAS_BACKEND" = jax ]\n'})
  # The JAX pass collects only the files that mark tests backend_independent.
  (tmp_path / "tests").mkdir()
  (tmp_path / "tests" / "test_both.py").write_text("pytestmark = pytest.mark.backend_independent\n")
  (tmp_path / "tests" / "test_tf.py").write_text("def test_x():\n  pass\n")
  result = subprocess.run(["bash", str(tmp_path / "scripts" / "test.sh"), "-k", "x"],
                          capture_output=True, text=True, timeout=60)
  calls = log.read_text().splitlines()
  assert [c.split()[:2] for c in calls] == [["ruff", "check"], ["python", "tensorflow"], ["python", "jax"]]
  assert calls[1].endswith(" tests -k x")
  assert calls[-1].endswith("-m backend_independent tests/test_both.py -k x")
  assert result.returncode != 0 and "TensorFlow pass" in result.stderr
  # The fast subset: the marker reaches both passes, the JAX pass keeping its own.
  log.unlink()
  subprocess.run(["bash", str(tmp_path / "scripts" / "test.sh")], capture_output=True, text=True,
                 timeout=60, env=dict(os.environ, TEST_MARKER="not slow"))
  calls = log.read_text().splitlines()
  assert "-m not slow tests" in calls[1]
  assert calls[2].endswith("-m backend_independent and (not slow) tests/test_both.py")


@pytest.mark.parametrize("command", sorted(CONSOLE_SCRIPTS))
def test_every_console_script_answers_help(command):
  """Each console script of pyproject.toml imports and prints its help (every flag with its
  default), from its module:function."""
  module, function = CONSOLE_SCRIPTS[command].split(":")
  code = f"import sys; sys.argv = [{command!r}, '--help']; from {module} import {function} as m; m()"
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert result.returncode == 0, result.stderr
  assert "usage:" in result.stdout and "--" in result.stdout


def test_each_console_script_runs_its_own_command():
  """t2t-lite-<name> runs t2t_lite.bin.<name>:main (`_` as `-`; t2t-lite-import runs importer,
  `import` being a keyword), and every command module of t2t_lite/bin (one defining main) has
  its script. Any command prints a help, so the help test alone passes a script pointed at
  another command's module, or a command left without a script."""
  commands = {path.stem for path in pathlib.Path(REPO, "t2t_lite", "bin").glob("*.py")
              if re.search(r"^def main\(", path.read_text(encoding="utf-8"), re.M)}
  assert len(commands) >= 10 and "importer" in commands and "quiet" not in commands
  expected = {f"t2t-lite-{'import' if name == 'importer' else name.replace('_', '-')}":
              f"t2t_lite.bin.{name}:main" for name in commands}
  assert expected == CONSOLE_SCRIPTS


def test_runtime_requirements_hold_no_test_only_package():
  runtime = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
  assert {"tensorflow", "tensorflow-text", "keras", "sacrebleu", "sentencepiece"} <= runtime
  assert not runtime & NOT_RUNTIME, f"test-only packages in the runtime requirements: {runtime & NOT_RUNTIME}"
  extras = PYPROJECT["project"]["optional-dependencies"]
  assert {_name(r) for r in extras["bench"]} == {"keras-hub", "ctranslate2"}
  assert any(_name(r) == "tensorflow" and "and-cuda" in r for r in extras["gpu"])
  test = {_name(r) for r in extras["test"]}
  assert {"pytest", "torch", "transformers", "jax", "ruff", "mkdocs"} <= test
  assert "t2t_lite[bench]" in extras["test"]  # the benchmarks' smoke tests need their peers


def test_python_bounds_match_tensorflow_wheels():
  """TensorFlow 2.18-2.21 publish wheels for CPython 3.10-3.13 (none for 3.14): outside those
  bounds pip says the Python is not supported instead of "no matching distribution for
  tensorflow". The package's description is its own short page, without repository paths."""
  assert PYPROJECT["project"]["requires-python"] == ">=3.10,<3.14"
  assert PYPROJECT["project"]["license"] == "Apache-2.0"
  assert os.path.exists(os.path.join(REPO, "LICENSE"))
  readme = pathlib.Path(REPO, PYPROJECT["project"]["readme"]).read_text(encoding="utf-8")
  assert "../shared" not in readme and len(readme) < 4000


def _run_setup(tmp_path, *args):
  """scripts/setup.sh in a copy of the repository's top files, with a stand-in Python whose
  venv has nothing installed: the pip calls it would make."""
  (tmp_path / "scripts").mkdir()
  for name in ("scripts/setup.sh", "pyproject.toml"):
    with open(os.path.join(REPO, name), encoding="utf-8") as f:
      (tmp_path / name).write_text(f.read())
  log = tmp_path / "calls.log"
  # The browser's installer (apt, as root) is a stand-in that logs its call.
  (tmp_path / "scripts" / "install_browser.sh").write_text(f'echo install_browser >> "{log}"\n')
  stubs = tmp_path / "stubs"
  stubs.mkdir()
  venv_bin = tmp_path / ".venv" / "bin"
  # The stand-in `python3 -m venv .venv` writes a venv whose python logs pip calls and fails imports.
  (stubs / "python3").write_text(f"""#!/bin/sh
mkdir -p "{venv_bin}"
printf 'PATH="{venv_bin}:$PATH"\\n' > "{venv_bin}/activate"
printf '#!/bin/sh\\n[ "$1" = -m ] && echo "$*" >> "{log}" && exit 0\\nexit 1\\n' > "{venv_bin}/python"
chmod +x "{venv_bin}/python"
""")
  os.chmod(stubs / "python3", 0o755)
  result = subprocess.run(["bash", str(tmp_path / "scripts" / "setup.sh"), *args], capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, PYTHON=str(stubs / "python3")))
  return result, log.read_text().splitlines() if log.exists() else []


def test_setup_installs_the_runtime_alone_for_the_quickstart(tmp_path):
  result, calls = _run_setup(tmp_path, "runtime")
  assert result.returncode == 0, result.stderr
  installs = [c for c in calls if c.startswith("-m pip install") and "--upgrade" not in c]
  assert installs == ["-m pip install -e ."]
  assert not any("--quiet" in c or " -q" in c for c in calls)  # pip's progress stays visible
  assert "install_browser" not in calls


def test_setup_installs_the_test_extra_by_default(tmp_path):
  result, calls = _run_setup(tmp_path)
  assert result.returncode == 0, result.stderr
  assert [c for c in calls if c.startswith("-m pip install") and "--upgrade" not in c] == [
      "-m pip install -e .[test]"]
  assert "install_browser" in calls   # Chromium for the serve page's browser test


def test_recipes_set_up_the_runtime_only():
  for script in ("quickstart.sh", "multi30k_recipe.sh", "multi30k_common.sh", "multi30k_tune.sh",
                 "parsing_recipe.sh", "t2t_walkthrough.sh"):
    text = pathlib.Path(REPO, "scripts", script).read_text(encoding="utf-8")
    assert "setup.sh runtime" in text or "multi30k_recipe.sh" in text, script
    assert not re.search(r"setup\.sh\s*$", text, re.M), f"{script} installs the test extra"
