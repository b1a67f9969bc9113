"""`pip install .` and `pip install -e .` both give t2t_lite.problems / t2t_lite.hparams from anywhere."""

import importlib.util
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = ("import t2t_lite.problems, t2t_lite.hparams, importlib.util, sys; "
         "assert t2t_lite.hparams.get_hparams('big').hidden_size == 1024; "
         "assert 'translate_ende' in t2t_lite.registry.problems; "
         "assert importlib.util.find_spec('problems') is None, 'problems/ leaked as a top-level package'; "
         "assert importlib.util.find_spec('hparams') is None, 'hparams/ leaked as a top-level package'; "
         "print(t2t_lite.__file__)")


def test_installed_environment_imports_from_another_directory(tmp_path):
  """The environment running the tests (an editable install in scripts/setup.sh)."""
  result = subprocess.run([sys.executable, "-c", CHECK], cwd=tmp_path, capture_output=True, text=True)
  assert result.returncode == 0, result.stderr


def test_regular_install_maps_problems_and_hparams_into_the_package(tmp_path):
  target = tmp_path / "site"
  isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
  build = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", *isolation,
                          "--target", str(target), REPO], capture_output=True, text=True, timeout=600)
  assert build.returncode == 0, build.stderr
  assert sorted(p for p in os.listdir(target) if not p.endswith(".dist-info")) == ["bin", "t2t_lite"]
  for name in ("trainer", "decoder", "datagen", "exporter", "avg-checkpoints", "bleu", "attention",
               "parse-eval"):
    assert os.path.exists(target / "bin" / f"t2t-lite-{name}")
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
  stubs = tmp_path / ".venv" / "bin"
  stubs.mkdir(parents=True)
  (stubs / "activate").write_text(f'PATH="{stubs}:$PATH"\n')
  log = tmp_path / "calls.log"
  (stubs / "ruff").write_text(f'#!/bin/sh\necho "ruff $*" >> "{log}"\n')
  # The TensorFlow pass fails (no KERAS_BACKEND), the JAX pass passes.
  (stubs / "python").write_text(f'#!/bin/sh\necho "python ${{KERAS_BACKEND:-tensorflow}} $*" >> "{log}"\n'
                                '[ "$KERAS_BACKEND" = jax ]\n')
  for stub in ("ruff", "python"):
    os.chmod(stubs / stub, 0o755)
  result = subprocess.run(["bash", str(tmp_path / "scripts" / "test.sh"), "-k", "x"],
                          capture_output=True, text=True, timeout=60)
  calls = log.read_text().splitlines()
  assert [c.split()[:2] for c in calls] == [["ruff", "check"], ["python", "tensorflow"], ["python", "jax"]]
  assert calls[-1].endswith("-m backend_independent tests -k x")
  assert result.returncode != 0 and "TensorFlow pass" in result.stderr
