#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the default test suite. Extra arguments go to pytest,
# e.g. `bash scripts/test.sh -m slow` for the long tests, `-n 0` for one process.
# The suite runs in as many pytest-xdist workers as the machine has cores, at most four
# ($TEST_WORKERS sets it), each test file on one worker; tests/conftest.py gives each worker its
# share of the cores. On two cores this cuts a third of the time: one process alone left a core
# idle while it started interpreters and waited on the commands and servers it tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cores=$(nproc 2>/dev/null || echo 1)
workers=${TEST_WORKERS:-$(( cores < 4 ? cores : 4 ))}
[ "$workers" -ge 2 ] || workers=0  # one core: no workers, the suite in this process
.venv/bin/python -m pytest -q -n "$workers" --dist loadfile "$@"
