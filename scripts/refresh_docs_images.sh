#!/usr/bin/env bash
# Refreshes the DevUI screenshots in docs/ that the DevUI docs page shows. The tests save them to a temporary
# folder, so a test run leaves the repository as it was; this runs the same browser tests with
# REFRESH_DOCS_IMAGES=1, which points them at docs/. Needs the environment scripts/test.sh builds.
# VENV= picks the virtual environment (default .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
for hook in scripts/services/*.sh; do
  [ -e "$hook" ] && bash "$hook"
done
REFRESH_DOCS_IMAGES=1 exec "${VENV:-.venv}/bin/python" -m pytest -q -p no:cacheprovider \
  tests/hosting/test_devui.py::test_devui_page_in_headless_chromium \
  tests/hosting/test_devui_traces.py "$@"
