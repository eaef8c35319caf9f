#!/usr/bin/env bash
# The project's test command (README Quickstart, step 2; .ci/run calls it too).
# Creates .venv if it is missing, installs the package with its test, bench, hosting, postgres, a2a, mcp and release extras (the
# smoke test of benchmarks/bench_peers.py needs LangGraph; tests/hosting needs the host packages), installs the
# services the tests need when they are missing, and runs the whole test suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh tests/test_workflow.py -q`.
# PYTHON= picks the interpreter that creates a missing venv (default python3), VENV= the venv folder (default
# .venv); .ci/run runs it once per supported Python, e.g. `PYTHON=python3.13 VENV=.venv-ci-3.13 bash scripts/test.sh`.
# CORE= pins agent-framework-core (e.g. CORE=1.23.0, the lowest release pyproject accepts); without it pip installs
# the newest release pyproject accepts.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${VENV:-.venv}"
if [ ! -x "$venv/bin/python" ]; then
  "${PYTHON:-python3}" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
core=()
if [ -n "${CORE:-}" ]; then
  core=("agent-framework-core==$CORE")
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[test,bench,hosting,postgres,a2a,mcp,release]" "${core[@]}"
"$venv/bin/python" -c 'import importlib.metadata as m; print("agent-framework-core", m.version("agent-framework-core"))'

for hook in scripts/services/*.sh; do
  [ -e "$hook" ] && bash "$hook"
done

exec "$venv/bin/python" -m pytest "$@"
