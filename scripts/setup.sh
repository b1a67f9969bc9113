#!/usr/bin/env bash
# Creates .venv (if missing) and installs t2t_lite into it, editable. Idempotent: installs only
# when a package or a console script of pyproject.toml is missing (an older editable install lacks
# the commands added since).
#
#   bash scripts/setup.sh            # with the test extra: what scripts/test.sh and CI need
#   bash scripts/setup.sh runtime    # the runtime dependencies only: what the quickstart and the
#                                    # recipes need (training, translation, export, parsing)
#
# pip shows its progress (a first install downloads TensorFlow and its dependencies, minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
WHAT=${1:-test}
case "$WHAT" in
  test) target=".[test]"; check_modules="jax, pytest, xdist, keras_hub, ctranslate2, mkdocs, torch, transformers"
        commands=ruff ;;
  runtime) target="."; check_modules=""; commands="" ;;
  *) echo "usage: $0 [test|runtime]" >&2; exit 2 ;;
esac
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
missing=0
for command in $commands $(sed -n 's/^\(t2t-lite-[a-z-]*\) = .*/\1/p' pyproject.toml); do
  command -v "$command" >/dev/null || missing=1
done
check="import t2t_lite, tensorflow, tensorflow_text, sacrebleu, sentencepiece${check_modules:+, $check_modules}"
if ! python -c "$check" 2>/dev/null || [ "$missing" = 1 ]; then
  echo "installing t2t_lite ($WHAT) into .venv"
  python -m pip install --upgrade pip "setuptools>=77"
  python -m pip install -e "$target"
fi
