#!/usr/bin/env bash
# Sets up (a virtual environment in .venv, if missing) and runs the checks: the linter (ruff,
# configured in pyproject.toml), everything on the TensorFlow backend, then the
# backend-independent layer, model and search tests again on JAX. Every pass runs whatever the
# others gave; the exit status is non-zero if any failed.
# Usage: bash scripts/test.sh [extra pytest args]
# Two pytest workers (pytest-xdist; a file's tests stay on one worker, so its fixtures are built
# once): most tests keep only one core busy. Files are handed out in collection order, which
# tests/conftest.py starts with the longest files (LONGEST_FIRST), so the run ends on short ones. On 2 cores (AMD EPYC, AVX2; 2026-11-23) the suite
# took 20 min 18 s this way (TensorFlow pass 17:26, JAX pass 2:52) against about 24 min serially.
# TEST_WORKERS=0 runs serially. TEST_MARKER="not slow" runs the fast subset in both passes
# (docs/testing.md; a -m among the extra arguments would replace the JAX pass's own marker).
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
. .venv/bin/activate
export TF_CPP_MIN_LOG_LEVEL=2 TF_ENABLE_ONEDNN_OPTS=1
# One TensorFlow intra-op thread in each pytest worker (tests/conftest.py; not in the processes
# tests start): two workers on 2 cores otherwise each start a pool per core. TEST_TF_THREADS=0
# keeps TensorFlow's default, as a serial run (TEST_WORKERS=0) does.
[ "${TEST_WORKERS:-2}" = 0 ] || export TEST_TF_THREADS="${TEST_TF_THREADS:-1}"
failed=()
parallel=(-n "${TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder)
[ "${TEST_WORKERS:-2}" = 0 ] && parallel=()
ruff check . || failed+=("ruff")
marker=(); jax_marker=backend_independent
if [ -n "${TEST_MARKER:-}" ]; then
  marker=(-m "$TEST_MARKER"); jax_marker="backend_independent and ($TEST_MARKER)"
fi
python -m pytest -q -p no:cacheprovider "${parallel[@]}" "${marker[@]}" tests "$@" || failed+=("TensorFlow pass")
# The JAX pass collects only the files that mark tests backend_independent: collecting every file
# would import, on each worker, what the TensorFlow-only files need.
mapfile -t jax_files < <(grep -l "mark\.backend_independent" tests/test_*.py 2>/dev/null)
[ ${#jax_files[@]} -gt 0 ] || jax_files=(tests)
KERAS_BACKEND=jax python -m pytest -q -p no:cacheprovider "${parallel[@]}" -m "$jax_marker" \
  "${jax_files[@]}" "$@" \
  || failed+=("JAX pass")
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "all passed: ruff, TensorFlow pass, JAX pass"
