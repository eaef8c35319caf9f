#!/usr/bin/env bash
# Service hook of scripts/test.sh: install Debian's chromium for the DevUI browser check
# (tests/hosting/test_devui.py drives /usr/bin/chromium headless with playwright-core), if it is missing.
# Idempotent: does nothing when /usr/bin/chromium exists. Nothing here starts a browser.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "chromium.sh: /usr/bin/chromium is missing and this user cannot install packages;" \
       "install it with: apt-get install -y chromium" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq chromium >/dev/null
[ -x /usr/bin/chromium ] || { echo "chromium.sh: /usr/bin/chromium still missing" >&2; exit 1; }
