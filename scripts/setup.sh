#!/usr/bin/env bash
# Creates .venv (if missing) and installs t2t_lite with its test extras into it. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
if ! python -c "import t2t_lite, tensorflow_text, jax, pytest" 2>/dev/null || ! command -v t2t-lite-trainer >/dev/null; then
  python -m pip install --quiet --upgrade pip
  python -m pip install --quiet -e ".[test]"
fi
