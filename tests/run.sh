#!/usr/bin/env bash
# Installs what the tests need (Python venv with boto3/awscli/DuckDB/PyIceberg/Polars/pyarrow/chDB,
# MinIO from the Go module proxy, the Iceberg REST catalog fixture and Trino from Maven Central, the
# client-matrix programs), builds Floe, then runs the Rust and the Python suites.
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
if ! "$PY" -c "import boto3, duckdb, duckdb_extension_iceberg, pyiceberg, polars, pyarrow, pytest, awscli, jsonschema, chdb, pytest_timeout" 2>/dev/null; then
  # Two steps: one pip call with pyiceberg's extras backtracks for minutes.
  "$PY" -m pip install -q boto3 awscli pytest
  "$PY" -m pip install -q -r tests/requirements.txt
fi
# The worker SDK from this checkout (sdk/python), installed as a pipeline author installs it
# (every run: the tests exercise this checkout's SDK).
"$PY" -m pip install -q --no-deps ./sdk/python
if [ ! -x "$FLOE_CACHE/bin/minio" ]; then
  GOBIN="$FLOE_CACHE/bin" go install github.com/minio/minio@latest
fi
if [ ! -x "$FLOE_CACHE/bin/helm" ]; then   # the chart's lint, template and structure test
  GOBIN="$FLOE_CACHE/bin" go install helm.sh/helm/v3/cmd/helm@v3.22.0
fi
# The Apache Iceberg REST catalog fixture (Java 17 + Maven; jars from Maven Central).
# Debian packages the build and the fixtures need, installed when missing (apt-get update first:
# a new machine has no package lists). A failed install shows apt's own error.
need=()
command -v cmake >/dev/null || need+=(cmake)          # pingora's libz-ng-sys build
command -v mvn >/dev/null || need+=(maven)            # the Iceberg REST catalog fixture
command -v java >/dev/null || need+=(openjdk-17-jre-headless)
command -v chromium >/dev/null || need+=(chromium)   # the console's page test (headless)
if [ "${#need[@]}" -gt 0 ]; then
  echo "installing ${need[*]} (apt-get)"
  apt_log="$(mktemp)"
  if ! { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "${need[@]}"; } >"$apt_log" 2>&1; then
    tail -n 30 "$apt_log"
    echo "could not install ${need[*]}: install them (apt-get install ${need[*]}) and rerun"
    exit 1
  fi
fi
export FLOE_ICEBERG_REST="$(tests/catalog/fetch.sh)"

tests/clients/build.sh   # the client matrix: AWS SDKs for Go and Java, s3fs, mc
tests/trino/fetch.sh >/dev/null   # Trino 476 for tests/test_engines.py (runs on Temurin 25)
tests/otelcol/build.sh >/dev/null   # a real OpenTelemetry Collector for the OTLP tests

# Disk: the suite moves a 5 GiB object through MinIO (tests/test_big.py) beside the caches it
# starts, and MinIO refuses writes (507 XMinioStorageFull) when its disk runs low. Cargo's
# incremental state is the one large thing here that a build can recreate, so it goes first.
free_gib() { df -Pk "$1" | awk 'NR==2 { print int($4 / 1048576) }'; }
need_gib=16
if [ "$(free_gib "$FLOE_CACHE")" -lt "$need_gib" ]; then
  echo "less than $need_gib GiB free under $FLOE_CACHE: removing $CARGO_TARGET_DIR/debug/incremental"
  rm -rf "$CARGO_TARGET_DIR/debug/incremental"
fi
# The suite runs the debug binaries (tests/conftest.py; FLOE_BUILD=release runs the release
# ones, which CI builds for the image check).
cargo build --bin floe-proxy --bin floe-control
# Cargo leaves a binary whose crates did not change as it was; it is current, so conftest's
# check (a binary older than any source) must not warn about it.
touch "$CARGO_TARGET_DIR/debug/floe-proxy" "$CARGO_TARGET_DIR/debug/floe-control"
# A PostgreSQL server (Debian's package) for the scheduler queue's Rust tests; the Python
# scheduler tests start their own.
pg_dir="$(mktemp -d)"
# pytest's temporary folders (MinIO's data, caches, logs: several GiB a run) live in one folder
# removed on exit; pytest's own default keeps the last three runs'. FLOE_KEEP_TMP=1 keeps it.
test_tmp="$(mktemp -d)"
trap 'tests/postgres.sh stop "$pg_dir"; [ "${FLOE_KEEP_TMP:-0}" = 1 ] || rm -rf "$test_tmp"' EXIT
# FLOE_PYTEST_ONLY=1 (tests/spark.sh, after a full run) skips the Rust tests.
if [ "${FLOE_PYTEST_ONLY:-0}" != 1 ]; then
  FLOE_TEST_PG_URL="$(tests/postgres.sh start "$pg_dir")" cargo test --workspace
  # The vendored foyer-storage's patch (vendor/README.md): its own test, not the crate's suite.
  cargo test --manifest-path vendor/foyer-storage/Cargo.toml --lib recycle
fi
export PATH="$FLOE_CACHE/venv/bin:$PATH" MINIO_BIN="$FLOE_CACHE/bin/minio"
for where in "$FLOE_CACHE" "$test_tmp"; do
  if [ "$(free_gib "$where")" -lt 8 ]; then
    echo "only $(free_gib "$where") GiB free under $where: the suite needs 8 (a 5 GiB object goes through MinIO)"
    exit 1
  fi
done
"$PY" -m pytest -q --basetemp "$test_tmp/pytest" tests "$@"
