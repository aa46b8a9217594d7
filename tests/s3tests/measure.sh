#!/usr/bin/env bash
# The measuring stick of issue 28: Ceph's s3-tests functional suite run against MinIO directly and
# through Floe (a route for every bucket, `bucket_operations: true`, filters sigv4 + blocks), then
# the tests that pass direct and fail through Floe. Not run by CI (the suite takes ~20 minutes per
# endpoint, and its code is not ours to copy); the project's own tests cover each kind it found.
#
#   tests/s3tests/measure.sh /path/to/s3-tests [pytest args, e.g. -k tagging]
#
# Needs MinIO and floe-proxy built (tests/run.sh does both); the suite's requirements go into a
# venv of their own under $FLOE_CACHE. Writes $OUT/{direct,floe}.xml and prints the differences.
set -euo pipefail
cd "$(dirname "$0")/../.."
suite="$(cd "${1:?usage: measure.sh /path/to/s3-tests [pytest args]}" && pwd)"; shift
FLOE_CACHE="${FLOE_CACHE:-$HOME/.cache/floe}"
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$FLOE_CACHE/target}"
MINIO_BIN="${MINIO_BIN:-$FLOE_CACHE/bin/minio}"
OUT="${OUT:-$(mktemp -d)}"; mkdir -p "$OUT"
venv="$FLOE_CACHE/s3tests-venv"
[ -x "$venv/bin/pytest" ] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q -r "$suite/requirements.txt"; }

key=s3testsorigin secret=s3tests-origin-secret
ckey=s3testsclient csecret=s3tests-client-secret
minio_port=$((20000 + RANDOM % 10000)); floe_port=$((minio_port + 1))
MINIO_ROOT_USER=$key MINIO_ROOT_PASSWORD=$secret "$MINIO_BIN" server --quiet \
  --address "127.0.0.1:$minio_port" "$OUT/minio" >"$OUT/minio.log" 2>&1 &
minio_pid=$!
cat >"$OUT/floe.yaml" <<YAML
server:
  listeners: [{address: "127.0.0.1:$floe_port"}]
  grace_period_seconds: 1
origins:
  minio:
    endpoint: http://127.0.0.1:$minio_port
    credentials: {from: env, access_key_env: S3T_K, secret_key_env: S3T_S}
routes:
  - bucket: "*"
    origin: minio
    clients: [{access_key: $ckey, secret_key: $csecret}]
    filters: [sigv4, blocks]
    bucket_operations: true
cache:
  dir: $OUT/cache
  block_bytes: 1048576
  data: {dram_bytes: 67108864, disk_bytes: 268435456}
  metadata: {dram_bytes: 33554432, disk_bytes: 67108864}
YAML
S3T_K=$key S3T_S=$secret "$CARGO_TARGET_DIR/debug/floe-proxy" --config "$OUT/floe.yaml" \
  >"$OUT/floe.log" 2>&1 &
floe_pid=$!
trap 'kill $minio_pid $floe_pid 2>/dev/null || true' EXIT
for port in $minio_port $floe_port; do
  for _ in $(seq 100); do (echo >/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.2; done
done

conf() {  # every user of the suite gets the endpoint's one key pair
  local port=$1 k=$2 s=$3
  printf '[DEFAULT]\nhost = 127.0.0.1\nport = %s\nis_secure = False\nssl_verify = False\n' "$port"
  printf '[fixtures]\nbucket prefix = s3t-{random}-\n'
  for user in "s3 main" "s3 alt" "s3 tenant" "iam" "iam root" "iam alt root"; do
    printf '[%s]\ndisplay_name = %s\nuser_id = %s\nemail = %s@example.com\naccess_key = %s\nsecret_key = %s\n' \
      "$user" "${user// /-}" "${user// /-}" "${user// /-}" "$k" "$s"
    [ "$user" != "s3 tenant" ] || printf 'tenant = testx\n'
  done
}
conf $minio_port $key $secret >"$OUT/direct.conf"
conf $floe_port $ckey $csecret >"$OUT/floe.conf"
files=(s3tests/functional/test_s3.py s3tests/functional/test_headers.py)
for side in ${SIDES:-direct floe}; do   # SIDES=floe: one side only (compare by hand)
  (cd "$suite" && S3TEST_CONF="$OUT/$side.conf" timeout 3600 "$venv/bin/pytest" -q -p no:cacheprovider \
     --junitxml="$OUT/$side.xml" "${files[@]}" "$@" >"$OUT/$side.txt" 2>&1) || true
  tail -n 1 "$OUT/$side.txt"
done
[ -f "$OUT/direct.xml" ] && [ -f "$OUT/floe.xml" ] || exit 0
"$venv/bin/python" - "$OUT" <<'PY'
import sys, xml.etree.ElementTree as ET
out = sys.argv[1]
def passed(side):
    res = {}
    for case in ET.parse(f"{out}/{side}.xml").iter("testcase"):
        name = case.get("classname", "") + "::" + case.get("name")
        res[name] = not any(c.tag in ("failure", "error", "skipped") for c in case)
    return res
direct, floe = passed("direct"), passed("floe")
worse = sorted(n for n, ok in direct.items() if ok and not floe.get(n, False))
better = sorted(n for n, ok in floe.items() if ok and not direct.get(n, False))
print(f"direct passes {sum(direct.values())}, floe passes {sum(floe.values())} of {len(direct)}")
print(f"PASS->FAIL through Floe: {len(worse)}"); [print("  -", n) for n in worse]
print(f"FAIL->PASS through Floe: {len(better)}"); [print("  +", n) for n in better]
PY
echo "logs and reports: $OUT"
