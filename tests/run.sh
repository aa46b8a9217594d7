#!/usr/bin/env bash
# Installs what the tests need (Python venv with boto3/awscli/DuckDB/PyIceberg/Polars/pyarrow,
# MinIO from the Go module proxy, the Iceberg REST catalog fixture from Maven Central), builds
# Floe, then runs the Rust and the Python suites.
# Everything is cached under ${FLOE_CACHE:-~/.cache/floe} so reruns are fast.
set -euo pipefail
cd "$(dirname "$0")/.."
export FLOE_CACHE="${FLOE_CACHE:-$HOME/.cache/floe}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$FLOE_CACHE/target}"
mkdir -p "$FLOE_CACHE/bin"

if [ ! -x "$FLOE_CACHE/venv/bin/python" ]; then
  python3 -m venv "$FLOE_CACHE/venv"
fi
PY="$FLOE_CACHE/venv/bin/python"
if ! "$PY" -c "import boto3, duckdb, duckdb_extension_iceberg, pyiceberg, polars, pyarrow, pytest, awscli" 2>/dev/null; then
  # Two steps: one pip call with pyiceberg's extras backtracks for minutes.
  "$PY" -m pip install -q boto3 awscli pytest
  "$PY" -m pip install -q -r tests/requirements.txt
fi
if [ ! -x "$FLOE_CACHE/bin/minio" ]; then
  GOBIN="$FLOE_CACHE/bin" go install github.com/minio/minio@latest
fi
# The Apache Iceberg REST catalog fixture (Java 17 + Maven; jars from Maven Central).
if ! command -v mvn >/dev/null || ! command -v java >/dev/null; then
  apt-get install -y maven openjdk-17-jre-headless >/dev/null 2>&1 || {
    echo "the Iceberg REST catalog fixture needs Java 17 and Maven (apt-get install maven)"; exit 1; }
fi
export FLOE_ICEBERG_REST="$(tests/catalog/fetch.sh)"
command -v cmake >/dev/null || { echo "cmake is needed to build pingora (apt-get install cmake)"; exit 1; }

cargo build --bin floe-proxy --bin floe-control
cargo test --workspace
export PATH="$FLOE_CACHE/venv/bin:$PATH" MINIO_BIN="$FLOE_CACHE/bin/minio"
"$PY" -m pytest -q tests "$@"
