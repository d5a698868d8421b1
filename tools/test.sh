#!/usr/bin/env bash
# Installs kqactors with its test extras and runs lint + the whole test suite (README's test command).
set -uo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e '.[test]' || exit 1
ruff check kqactors tests benchmarks tools || exit 1
python -m pytest --durations=25 "$@"   # the 25 slowest, to keep CI within its budget
rc=$?
# pytest exits 5 when no test was collected; that is not a failure here.
if [ "$rc" -eq 5 ]; then exit 0; fi
exit "$rc"
