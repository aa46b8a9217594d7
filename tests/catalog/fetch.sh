#!/usr/bin/env bash
# Resolves the Apache Iceberg REST catalog fixture and its class path from Maven Central into
# ~/.cache/floe/iceberg-rest (once). Prints the directory.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${FLOE_CACHE:-$HOME/.cache/floe}/iceberg-rest"
if [ ! -f "$dest/.complete" ]; then
  mkdir -p "$dest"
  mvn -q -f "$here/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$dest" -DincludeScope=runtime >&2
  touch "$dest/.complete"
fi
echo "$dest"
