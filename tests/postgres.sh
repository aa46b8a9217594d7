#!/usr/bin/env bash
# A throwaway PostgreSQL server from Debian's package, for the scheduler's tests.
#   tests/postgres.sh start DIR   -> initdb in DIR, start on a free port, print its URL
#   tests/postgres.sh stop DIR
# As root the server runs as the `postgres` user (initdb refuses root), in a folder of its own
# under /tmp (DIR may sit below folders it cannot enter); DIR/real names it.
set -euo pipefail
cmd="${1:?start|stop}"; dir="${2:?DIR}"
bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
if [ -z "$bin" ]; then
  log="$(mktemp)"
  if ! { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql; } >"$log" 2>&1; then
    tail -n 30 "$log" >&2; echo "could not install postgresql (apt-get install postgresql)" >&2; exit 1
  fi
  bin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
fi
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case "$cmd" in
  start)
    mkdir -p "$dir"
    real="$dir"
    if [ "$(id -u)" = 0 ]; then real="$(mktemp -d /tmp/floe-pg.XXXXXX)"; chown postgres "$real"; fi
    echo "$real" > "$dir/real"
    dir="$real"
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
    as_pg "$bin/initdb" -D "$dir/data" -U floe --auth=trust -E UTF8 >/dev/null
    as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
    echo "postgres://floe@127.0.0.1:$port/postgres"
    ;;
  stop)
    [ -f "$dir/real" ] || exit 0   # never started (FLOE_PYTEST_ONLY=1)
    dir="$(cat "$dir/real")"
    as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    case "$dir" in /tmp/floe-pg.*) rm -rf "$dir" ;; esac
    ;;
esac
