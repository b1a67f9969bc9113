#!/usr/bin/env bash
# Sets up (a virtual environment in .venv, if missing) and runs the checks: the linter (ruff,
# configured in pyproject.toml), everything on the TensorFlow backend, then the
# backend-independent layer, model and search tests again on JAX.
# Usage: bash scripts/test.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export TF_CPP_MIN_LOG_LEVEL=2 TF_ENABLE_ONEDNN_OPTS=1
ruff check .
python -m pytest -q -p no:cacheprovider tests "$@"
KERAS_BACKEND=jax python -m pytest -q -p no:cacheprovider -m backend_independent tests "$@"
