"""Per-route quotas (issue 27): one floe-proxy, two routes on one block cache. The `quota-scan`
route has a share of the data store (8 MiB DRAM, 64 MiB disk: `cache.shares`), the test
bucket's route uses what is left (16 MiB, 64 MiB). The scanning route reads 4x its share,
twice; the other route's hot set must still be served with no origin request (its hit ratio
kept). The same run without the share is the control: the scan pushes the hot set out of the
cache. Per-route metrics name the share's store."""
import os
import urllib.request

import pytest

from conftest import ADMIN_TOKEN, BUCKET, CLIENT, FLOE_BIN, ORIGIN_KEY, ORIGIN_SECRET, Proc, free_port, s3_client, wait_port
from relay import Relay

SCAN = "quota-scan"
MIB = 1 << 20
SHARE = (8 * MIB, 64 * MIB)
HOT = [f"quota/hot-{i}.bin" for i in range(8)]  # 16 MiB
SCAN_KEYS = [f"scan-{i:03}.bin" for i in range(4 * (SHARE[0] + SHARE[1]) // (2 * MIB))]

YAML = """
server:
  listeners: [{{address: "127.0.0.1:{port}"}}]
  metrics_address: 127.0.0.1:{mport}
  grace_period_seconds: 1
origins:
  minio:
    endpoint: http://127.0.0.1:{relay}
    credentials: {{from: env, access_key_env: K, secret_key_env: S}}
routes:
  - bucket: {bucket}
    origin: minio
    clients: [{{access_key: {c1}, secret_key: {s1}}}]
    filters: [sigv4, blocks]
  - bucket: {scan}
    origin: minio
    clients: [{{access_key: {c1}, secret_key: {s1}}}]
    filters: [sigv4, blocks]
cache:
  dir: {cache}
  block_bytes: 2097152
  data: {{dram_bytes: {dram}, disk_bytes: {disk}}}
  metadata: {{dram_bytes: 33554432, disk_bytes: 67108864}}
{shares}
admin:
  address: 127.0.0.1:{aport}
  token: {token}
"""


def start(tmp, relay, share):
    port, mport, aport = free_port(), free_port(), free_port()
    shares = f"  shares: [{{bucket: {SCAN}, dram_bytes: {SHARE[0]}, disk_bytes: {SHARE[1]}}}]" if share else ""
    # The same totals either way: with the share, the test bucket's route gets what is left.
    (tmp / "floe.yaml").write_text(YAML.format(
        port=port, mport=mport, aport=aport, relay=relay.port, bucket=BUCKET, scan=SCAN,
        c1=CLIENT[0], s1=CLIENT[1], cache=tmp / "cache", dram=16 * MIB + SHARE[0],
        disk=64 * MIB + SHARE[1], shares=shares, token=ADMIN_TOKEN))
    env = dict(os.environ, K=ORIGIN_KEY, S=ORIGIN_SECRET)
    p = Proc([str(FLOE_BIN), "--config", str(tmp / "floe.yaml")], env, tmp / "floe.log", port, "floe-proxy")
    wait_port(aport, p.proc, "floe admin")
    p.mport, p.aport = mport, aport
    return p


def metrics(p):
    with urllib.request.urlopen(f"http://127.0.0.1:{p.mport}/metrics", timeout=10) as r:
        return r.read().decode()


@pytest.fixture(scope="module")
def objects(minio):
    direct = s3_client(minio.port, ORIGIN_KEY, ORIGIN_SECRET)
    if SCAN not in [b["Name"] for b in direct.list_buckets()["Buckets"]]:
        direct.create_bucket(Bucket=SCAN)
    hot = {k: os.urandom(2 * MIB) for k in HOT}
    for k, body in hot.items():
        direct.put_object(Bucket=BUCKET, Key=k, Body=body)
    for k in SCAN_KEYS:
        direct.put_object(Bucket=SCAN, Key=k, Body=os.urandom(2 * MIB))
    return hot


@pytest.mark.parametrize("share", [True, False], ids=["share", "no-share"])
def test_a_scan_past_its_share_leaves_the_other_routes_hot_set(minio, objects, tmp_path, share):
    relay = Relay(minio.port)
    p = start(tmp_path, relay, share)
    try:
        s3 = s3_client(p.port, *CLIENT)
        for _ in range(2):  # the second read is admitted under pressure
            for k, body in objects.items():
                assert s3.get_object(Bucket=BUCKET, Key=k)["Body"].read() == body
        for _ in range(2):
            for k in SCAN_KEYS:
                assert len(s3.get_object(Bucket=SCAN, Key=k)["Body"].read()) == 2 * MIB
        mark = len(relay.lines)
        for k, body in objects.items():
            assert s3.get_object(Bucket=BUCKET, Key=k)["Body"].read() == body
        # GETs only: a HEAD is the 5 s TTL's revalidation of these (mutable) keys, no bytes.
        hot_gets = [line for line in relay.lines[mark:] if line[0] == "GET" and "/quota/hot-" in line[1]]
        stats = p_admin(p, "/stats")
        if share:
            assert hot_gets == [], "the scan past its share evicted the other route's hot set"
            st = stats["shares"][SCAN]
            assert st["evictions"] > 0 and st["dram_capacity_bytes"] <= SHARE[0], st
            assert stats["data"]["dram_capacity_bytes"] <= 16 * MIB
            text = metrics(p)
            assert f'floe_cache_hits_total{{store="data:{SCAN}"}}' in text
            assert f'floe_cache_dram_capacity_bytes{{store="data:{SCAN}"}}' in text
        else:
            # The control: one shared store, and the scan pushes the hot set out.
            assert len(hot_gets) > 0, "the control run should have evicted the hot set"
            assert stats["shares"] == {}
    finally:
        p.stop()
        relay.down()


def p_admin(p, path):
    import json
    req = urllib.request.Request(f"http://127.0.0.1:{p.aport}{path}",
                                 headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())
