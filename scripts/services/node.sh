#!/usr/bin/env bash
# Service hook of scripts/test.sh: install the node packages of tests/hosting/js (the official
# @ag-ui/client and playwright-core, pinned by its package-lock.json) with `npm ci`, if node_modules is
# missing. Needs node and npm on PATH (installs Debian's nodejs and npm when they are missing).
set -euo pipefail
cd "$(dirname "$0")/../../tests/hosting/js"

if [ -d node_modules ]; then
  exit 0
fi

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    as_root=()
  elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
  else
    echo "node.sh: node/npm are missing and this user cannot install packages;" \
         "install them with: apt-get install -y nodejs npm" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" apt-get install -y -qq nodejs npm >/dev/null
fi

npm ci --no-audit --no-fund --loglevel=error
