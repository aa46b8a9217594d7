#!/usr/bin/env bash
# The three-engine wave (load/wave.py): installs what it needs (the test installer's venv,
# MinIO, the REST catalog fixture and Trino; toxiproxy; DuckDB's tpcds extension), builds Floe
# in release mode, runs the wave, which writes its section of load/PERFORMANCE.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export FLOE_CACHE="${FLOE_CACHE:-$HOME/.cache/floe}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$FLOE_CACHE/target}"
tests/run.sh --co -q >/dev/null   # reuse the test installer (venv, MinIO, chDB); collects only
PY="$FLOE_CACHE/venv/bin/python"
"$PY" -c "import duckdb_extension_tpcds" 2>/dev/null || "$PY" -m pip install -q 'duckdb-extension-tpcds==1.5.5'
if [ ! -x "$FLOE_CACHE/bin/toxiproxy-server" ]; then
  GOBIN="$FLOE_CACHE/toxi" go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.5.0
  cp "$FLOE_CACHE/toxi/server" "$FLOE_CACHE/bin/toxiproxy-server"
fi
export FLOE_ICEBERG_REST="$(tests/catalog/fetch.sh)"
tests/trino/fetch.sh >/dev/null
cargo build --release --bin floe-proxy
exec "$PY" load/wave.py "$@"
