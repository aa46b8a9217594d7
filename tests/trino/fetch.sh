#!/usr/bin/env bash
# Installs Trino 476 (the last release on Maven Central) into ~/.cache/floe/trino once:
# the whole tarball is extracted (it hard-links files across plugin folders, so a partial
# extract fails), then every plugin but iceberg and tpch is removed (~820 MB -> ~490 MB).
# Its jars need Java 24+; the machine's Temurin 25 is used. Prints the server's directory.
set -euo pipefail
version=476
dest="${FLOE_CACHE:-$HOME/.cache/floe}/trino"
if [ ! -f "$dest/.complete" ]; then
  rm -rf "$dest" && mkdir -p "$dest"
  mvn -q dependency:copy -Dartifact="io.trino:trino-server:$version:tar.gz" \
    -DoutputDirectory="$dest" -Dmdep.useBaseVersion=true >&2
  tar -xzf "$dest/trino-server-$version.tar.gz" -C "$dest"
  rm "$dest/trino-server-$version.tar.gz"
  find "$dest/trino-server-$version/plugin" -mindepth 1 -maxdepth 1 -type d \
    ! -name iceberg ! -name tpch -exec rm -rf {} +
  touch "$dest/.complete"
fi
echo "$dest/trino-server-$version"
