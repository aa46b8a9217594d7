#!/usr/bin/env bash
# The compaction benchmark: a table warmed by a 3-query working set is compacted (a `replace`
# commit rewriting 12 files into 4); the first query wave after it runs against Floe with
# floe-control's prefetch on, then (on a twin table) off. Block hit ratios, origin bytes and wave
# time go into the compaction section of load/PERFORMANCE.md.
# Runs the same test CI runs (tests/test_control.py), with its report kept.
set -euo pipefail
cd "$(dirname "$0")/.."
export FLOE_CACHE="${FLOE_CACHE:-$HOME/.cache/floe}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$FLOE_CACHE/target}"
export FLOE_ICEBERG_REST="$(tests/catalog/fetch.sh)"
export MINIO_BIN="$FLOE_CACHE/bin/minio" PATH="$FLOE_CACHE/venv/bin:$PATH"
cargo build --bin floe-proxy --bin floe-control
report="$(mktemp)"
FLOE_COMPACTION_REPORT="$report" python -m pytest -q tests/test_control.py -k compaction
python - "$report" <<'PY'
import json, pathlib, sys, datetime
r = json.loads(pathlib.Path(sys.argv[1]).read_text())
rows = []
for mode, v in r.items():
    ratio, hits, fetched, origin = v["data"]
    rows.append(f"| {mode.replace('_', ' ')} | {v['replaced']} -> {v['new']} | {v['prefetched'] / 2**20:.1f} "
                f"| {ratio:.0%} ({hits} hit, {fetched} fetched) | {origin / 2**20:.1f} | {v['wave_s']:.2f} |")
section = "\n".join([
    "<!-- compaction:begin -->",
    "## Compaction: first query wave after a `replace` commit",
    "",
    f"Produced by `load/compaction.sh` on {datetime.date.today()} (debug builds; MinIO origin behind a "
    "relay adding 30 ms to each origin request during the measured wave; PyIceberg reader through "
    "Floe; floe-control polling the Iceberg REST fixture every 200 ms). "
    "A 2.4M-row table partitioned by `p` (4 partitions, 3 appends = 12 files) is read by a 3-query "
    "working set twice, then compacted by a PyIceberg `replace` commit into 4 files. The ratio is "
    "data-store blocks hit / (hit + fetched from the origin) during the first wave after the "
    "commit; footers live in the metadata store and floe-control warms them in both runs.",
    "",
    "| floe-control | files | prefetched MiB | data blocks hit | origin MiB in wave | wave s |",
    "|---|---:|---:|---:|---:|---:|",
    *rows,
    "<!-- compaction:end -->",
])
sys.path.insert(0, "load")
from perfdoc import write_section  # noqa: E402
write_section("<!-- compaction:begin -->", "<!-- compaction:end -->", section + "\n")
print(section)
PY
