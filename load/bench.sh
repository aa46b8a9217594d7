#!/usr/bin/env bash
# One command: installs what the benchmark needs (MinIO, toxiproxy, Debian's nginx, DuckDB's
# tpch extension), builds Floe in release mode, runs load/bench.py, which writes
# load/PERFORMANCE.md. bench.py took ~50 minutes on 2 cores on 2026-12-05 (first run longer: data
# generation); fleet_bench.py and writeback_bench.py add their own.
set -euo pipefail
cd "$(dirname "$0")/.."
export FLOE_CACHE="${FLOE_CACHE:-$HOME/.cache/floe}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$FLOE_CACHE/target}"
tests/run.sh --co -q >/dev/null   # reuse the test installer (venv, MinIO); collects only
PY="$FLOE_CACHE/venv/bin/python"
"$PY" -c "import duckdb_extension_tpch" 2>/dev/null || "$PY" -m pip install -q 'duckdb-extension-tpch==1.5.5'
if [ ! -x "$FLOE_CACHE/bin/toxiproxy-server" ]; then
  GOBIN="$FLOE_CACHE/toxi" go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.5.0
  cp "$FLOE_CACHE/toxi/server" "$FLOE_CACHE/bin/toxiproxy-server"
fi
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || { apt-get update && apt-get install -y nginx-light; }
command -v perf >/dev/null || apt-get install -y linux-perf || true
(cd load/loadgen && go build -o "$FLOE_CACHE/bin/floe-loadgen" .)
cargo build --release --bin floe-proxy
"$PY" load/bench.py "$@"
FLOE_BIN="$CARGO_TARGET_DIR/release/floe-proxy" "$PY" load/fleet_bench.py
FLOE_BIN="$CARGO_TARGET_DIR/release/floe-proxy" exec "$PY" load/writeback_bench.py
