#!/usr/bin/env bash
# The release check, run by CI (.ci/run) after the tests: build the sdist and the wheel, check
# them with twine, install the wheel into a fresh virtual environment (PyTorch first, as
# scripts/setup.sh installs it) and run the installed `translate` there, outside the clone.
# PYTHON: the interpreter that builds (default .venv/bin/python); KEEP=DIR keeps the build there.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
work=${KEEP:-$(mktemp -d)}
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work"
"$python" -m pip install --quiet build twine
if ! "$python" -m build --outdir "$work/dist" . >"$work/build.log" 2>&1; then
  cat "$work/build.log"
  echo "release check: the build failed" >&2
  exit 1
fi
"$python" -m twine check --strict "$work"/dist/*
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --upgrade pip
PYTHON="$work/venv/bin/python" bash scripts/install_torch.sh
"$work/venv/bin/python" -m pip install --quiet "$work"/dist/*.whl
cd "$work"  # away from the clone: the installed package, not the source tree, answers
"$work/venv/bin/translate" --help >/dev/null
"$work/venv/bin/translate" train --help >/dev/null
"$work/venv/bin/python" - <<'PY'
import importlib.resources, translate
from translate import api  # the Python API imports without the clone
page = importlib.resources.files("translate") / "serve" / "page"  # not importing serve
assert any(page.iterdir()), "the serve page is missing from the wheel"
print(f"release check: translate {translate.__version__} from {translate.__file__}")
PY
echo "release check passed: $(cd "$work/dist" && ls | tr '\n' ' ')"
