#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (FUZZ_SECONDS each, default 60), from the seeds in
# fuzz/corpus/<target> (kept in the repo) and what earlier runs found (cached outside the
# clone). A crash fails the run; its input is left in fuzz/artifacts/<target>/ to commit as a
# seed with the fix. Installs cargo-fuzz (crates.io) under ${FLOE_CACHE:-~/.cache/floe}.
#   fuzz/run.sh                 # every target, 60 s each
#   FUZZ_SECONDS=3600 fuzz/run.sh chunked
set -euo pipefail
cd "$(dirname "$0")/.."
export FLOE_CACHE="${FLOE_CACHE:-$HOME/.cache/floe}"
export CARGO_TARGET_DIR="$FLOE_CACHE/target-fuzz"
seconds="${FUZZ_SECONDS:-60}"
if [ ! -x "$FLOE_CACHE/cargo-fuzz/bin/cargo-fuzz" ]; then
  cargo install cargo-fuzz --version 0.13.2 --locked --root "$FLOE_CACHE/cargo-fuzz"
fi
export PATH="$FLOE_CACHE/cargo-fuzz/bin:$PATH"
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=(chunked sigv4_parse range s3_xml peer_wire config post_form wb_service)
cargo +nightly fuzz build -O
for t in "${targets[@]}"; do
  found="$FLOE_CACHE/fuzz-corpus/$t"
  mkdir -p "$found" "fuzz/corpus/$t"
  start=$(date +%s)
  cargo +nightly fuzz run -O "$t" "$found" "fuzz/corpus/$t" -- \
    -max_total_time="$seconds" -max_len=70000 -timeout=10 -print_final_stats=1 2>"$FLOE_CACHE/fuzz-$t.log" || {
    tail -n 40 "$FLOE_CACHE/fuzz-$t.log"
    echo "fuzz target $t failed: see fuzz/artifacts/$t/"
    exit 1
  }
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$FLOE_CACHE/fuzz-$t.log" | grep -o '[0-9]*$' || echo "?")
  echo "fuzz $t: $runs runs in $(( $(date +%s) - start )) s, no crash"
done
