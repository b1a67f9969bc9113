#!/usr/bin/env bash
# Sets up (a virtual environment in .venv, if missing) and runs the whole test suite:
# everything on the TensorFlow backend, then the backend-independent layer, model and search tests
# again on JAX.  Usage: bash scripts/test.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
if ! python -c "import t2t_lite, tensorflow_text, jax, pytest" 2>/dev/null; then
  python -m pip install --quiet --upgrade pip
  python -m pip install --quiet -e ".[test]"
fi
export TF_CPP_MIN_LOG_LEVEL=2 TF_ENABLE_ONEDNN_OPTS=1
python -m pytest -q -p no:cacheprovider tests "$@"
KERAS_BACKEND=jax python -m pytest -q -p no:cacheprovider -m backend_independent tests "$@"
