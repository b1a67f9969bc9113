#!/usr/bin/env bash
# Creates .venv (if missing) and installs t2t_lite with its test extras into it. Idempotent.
# The marian-test extra (PyTorch's CPU build and transformers: the reference that
# tests/test_import_marian.py checks the Marian import against) adds about 50 s to a setup
# (measured here: torch 34 s from the wheel on this disk, transformers and its dependencies 13 s).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
# Reinstall when a package, the linter or any console script of pyproject.toml is missing (an
# older editable install lacks the commands added since).
missing=0
for command in ruff $(sed -n 's/^\(t2t-lite-[a-z-]*\) = .*/\1/p' pyproject.toml); do
  command -v "$command" >/dev/null || missing=1
done
check="import t2t_lite, tensorflow_text, jax, pytest, xdist, importlib.util as u
assert u.find_spec('torch') and u.find_spec('transformers')"
if ! python -c "$check" 2>/dev/null || [ "$missing" = 1 ]; then
  python -m pip install --quiet --upgrade pip
  python -m pip install --quiet -e ".[test,marian-test]"
fi
