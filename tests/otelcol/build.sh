#!/usr/bin/env bash
# Builds the tests' OpenTelemetry Collector (OTLP receiver + file exporter, collector modules
# v0.165.0 from the Go module proxy) into $FLOE_CACHE/bin/floe-otelcol, when missing or stale.
set -euo pipefail
cd "$(dirname "$0")"
out="${FLOE_CACHE:-$HOME/.cache/floe}/bin/floe-otelcol"
if [ ! -x "$out" ] || [ main.go -nt "$out" ] || [ go.mod -nt "$out" ]; then
  mkdir -p "$(dirname "$out")"
  go build -o "$out" .
fi
echo "$out"
