#!/usr/bin/env bash
# Builds the client-matrix programs (tests/test_client_matrix.py) into $FLOE_CACHE/clients:
# the AWS SDK for Go v2 program, the AWS SDK for Java v2 program (Maven), the AWS SDK for Rust
# program (its own cargo workspace and target directory), a virtualenv with
# s3fs (its own: s3fs pins botocore through aiobotocore), and the MinIO client mc. Each is
# rebuilt only when missing or when its sources changed.
set -euo pipefail
cd "$(dirname "$0")"
FLOE_CACHE="${FLOE_CACHE:-$HOME/.cache/floe}"
OUT="$FLOE_CACHE/clients"
mkdir -p "$OUT"
stamp() { cat "$@" | sha256sum | cut -c1-16; }

s=$(stamp go/main.go go/go.mod go/go.sum)
if [ "$(cat "$OUT/go.stamp" 2>/dev/null)" != "$s" ]; then
  (cd go && go build -o "$OUT/s3check-go" .)
  echo "$s" >"$OUT/go.stamp"
fi

s=$(stamp java/pom.xml java/src/main/java/S3Check.java)
if [ "$(cat "$OUT/java.stamp" 2>/dev/null)" != "$s" ]; then
  build="$(mktemp -d)"
  cp -r java/. "$build/"
  (cd "$build" && mvn -q -B package dependency:copy-dependencies -DincludeScope=runtime)
  rm -rf "$OUT/java" && mkdir -p "$OUT/java"
  cp -r "$build/target/classes" "$build/target/dependency" "$OUT/java/"
  rm -rf "$build"
  echo "$s" >"$OUT/java.stamp"
fi

s=$(stamp rust/Cargo.toml rust/Cargo.lock rust/src/main.rs 2>/dev/null || stamp rust/Cargo.toml rust/src/main.rs)
if [ "$(cat "$OUT/rust.stamp" 2>/dev/null)" != "$s" ]; then
  (cd rust && CARGO_TARGET_DIR="$OUT/rust-target" cargo build -q)
  cp "$OUT/rust-target/debug/s3check" "$OUT/s3check-rust"
  echo "$s" >"$OUT/rust.stamp"
fi

if [ ! -x "$OUT/venv-s3fs/bin/python" ] || ! "$OUT/venv-s3fs/bin/python" -c "import s3fs" 2>/dev/null; then
  python3 -m venv "$OUT/venv-s3fs"
  "$OUT/venv-s3fs/bin/python" -m pip install -q 's3fs==2026.9.0'
fi

if [ ! -x "$OUT/mc" ]; then
  GOBIN="$OUT/gobin" go install github.com/minio/mc@v0.0.0-20250313080218-cf909e1063a9  # RELEASE.2025-03-12
  cp "$OUT/gobin/mc" "$OUT/mc"
fi
