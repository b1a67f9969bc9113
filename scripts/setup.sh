#!/usr/bin/env bash
# Creates .venv (if missing) and installs t2t_lite with its test extras into it. Idempotent.
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
if ! python -c "import t2t_lite, tensorflow_text, jax, pytest" 2>/dev/null || [ "$missing" = 1 ]; then
  python -m pip install --quiet --upgrade pip
  python -m pip install --quiet -e ".[test]"
fi
