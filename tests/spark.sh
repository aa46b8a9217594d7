#!/usr/bin/env bash
# Spark through Floe (tests/test_spark.py): installs pyspark into the test venv (the Iceberg
# Spark runtime, iceberg-aws-bundle and hadoop-aws come from Maven Central when the Spark
# session starts), then runs tests/run.sh for the Spark tests only. CI runs it after the
# default suite.
set -euo pipefail
cd "$(dirname "$0")/.."
export FLOE_CACHE="${FLOE_CACHE:-$HOME/.cache/floe}"
PY="$FLOE_CACHE/venv/bin/python"
[ -x "$PY" ] || python3 -m venv "$FLOE_CACHE/venv"
"$PY" -c "import pyspark" 2>/dev/null || "$PY" -m pip install -q 'pyspark==4.1.4'
# The Rust tests ran in the default suite (tests/run.sh) already.
FLOE_SPARK=1 FLOE_PYTEST_ONLY=1 exec tests/run.sh -k test_spark "$@"
