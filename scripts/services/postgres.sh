#!/usr/bin/env bash
# Service hook of scripts/test.sh: install Debian's PostgreSQL server binaries for the Postgres tests, if missing.
# Idempotent: does nothing when /usr/lib/postgresql/<version>/bin/initdb exists. The tests start their own
# throwaway clusters (tests/postgres_server.py: initdb and pg_ctl as the `postgres` user, data folder and
# socket in a fresh temporary folder, listening on 127.0.0.1 on a free port) and stop them afterwards;
# nothing here starts a service. Debian's package starts a default cluster on port 5432 when installed with
# a running init system; the tests never use it.
set -euo pipefail

if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null && id postgres >/dev/null 2>&1; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "postgres.sh: PostgreSQL is missing and this user cannot install packages;" \
       "install it with: apt-get install -y postgresql" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends postgresql >/dev/null
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || { echo "postgres.sh: initdb still missing" >&2; exit 1; }
