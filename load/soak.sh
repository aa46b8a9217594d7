#!/usr/bin/env bash
# The soak (load/soak.py): installs what it needs (the test installer's venv and MinIO,
# matplotlib for the plots), builds a release floe-proxy, runs for SOAK_SECONDS (default 3600).
set -euo pipefail
cd "$(dirname "$0")/.."
export FLOE_CACHE="${FLOE_CACHE:-$HOME/.cache/floe}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$FLOE_CACHE/target}"
PY="$FLOE_CACHE/venv/bin/python"
[ -x "$PY" ] && [ -x "$FLOE_CACHE/bin/minio" ] || tests/run.sh --co -q >/dev/null   # venv, MinIO
"$PY" -c "import matplotlib" 2>/dev/null || "$PY" -m pip install -q matplotlib
cargo build --release --bin floe-proxy
export FLOE_BIN="$CARGO_TARGET_DIR/release/floe-proxy" MINIO_BIN="$FLOE_CACHE/bin/minio"
exec "$PY" load/soak.py "$@"
