"""Nothing stale after a write, in a fleet: a write through any node is seen by every node's
next read (the writer's too), a key a folding origin renames is one key, a DeleteObjects body
Floe cannot read never reaches the origin, and random writes and reads through random nodes
never read an older version than the last acknowledged one."""
import concurrent.futures
import hashlib
import base64
import os
import random
import threading
import time

import pytest
import urllib3

from conftest import BUCKET, s3_client
from fleet import start_fleet
from relay import Relay
from test_sigv4 import sign

HTTP = urllib3.PoolManager(maxsize=32, retries=False)


@pytest.fixture(scope="module")
def fleet3(minio, tmp_path_factory):
    d = tmp_path_factory.mktemp("consistency")
    relay = Relay(minio.port)
    nodes = start_fleet(d, relay.port)
    yield nodes
    for nd in nodes:
        nd.stop()
    relay.down()


def send(method, port, raw_key, body=b"", headers=None):
    url = f"http://127.0.0.1:{port}/{BUCKET}/{raw_key}"
    req = sign(method, url, body=body, headers=headers)
    return HTTP.request(method, url, body=body or None, headers=dict(req.headers))


def read_everywhere(nodes, key):
    """(status, body) of a GET of `key` through each node, the order given."""
    out = []
    for nd in nodes:
        r = send("GET", nd.port, key)
        out.append((r.status, r.data if r.status == 200 else None))
    return out


@pytest.mark.parametrize("key", ["cons/t/data/00000-0-a.parquet", "cons/state/current.bin"])
def test_a_write_through_one_node_is_seen_by_every_node_next_read(fleet3, direct, key):
    nodes = fleet3
    v1, v2 = os.urandom(300_000), os.urandom(200_000)
    direct.put_object(Bucket=BUCKET, Key=key, Body=v1)
    for _ in range(2):  # warm on every node (the second read is a hit)
        assert read_everywhere(nodes, key) == [(200, v1)] * 3
    writer = nodes[1]
    assert send("PUT", writer.port, key, v2).status == 200
    # The writer first, then the others: none answers the replaced version.
    assert read_everywhere([writer, nodes[0], nodes[2]], key) == [(200, v2)] * 3
    assert send("DELETE", nodes[2].port, key).status == 204
    assert read_everywhere([nodes[2], nodes[1], nodes[0]], key) == [(404, None)] * 3


def test_a_write_at_the_origin_is_seen_within_twice_the_rewritable_ttl(fleet3, direct):
    """Writes that bypass Floe: immutable-class keys are never revalidated (by design); a
    rewritable key's mapping lives `mutable_ttl` on its owner and again on a node that took it
    from the owner, so every node sees the write within 2 x mutable_ttl (5 s by default)."""
    nodes = fleet3
    key = "cons/state/bypass.bin"
    direct.put_object(Bucket=BUCKET, Key=key, Body=b"old" * 1000)
    assert read_everywhere(nodes, key) == [(200, b"old" * 1000)] * 3
    direct.put_object(Bucket=BUCKET, Key=key, Body=b"new" * 1000)
    start = time.monotonic()
    while read_everywhere(nodes, key) != [(200, b"new" * 1000)] * 3:
        assert time.monotonic() - start < 2 * 5.0 + 1.0, "a node kept the old version too long"
        time.sleep(0.1)
    print(f"all nodes saw the origin's write after {time.monotonic() - start:.2f} s")


@pytest.mark.parametrize("raw", ["/cons/fold{}/v.parquet", "cons//fold{}/v.parquet", "cons/./fold{}/v.parquet"])
def test_a_key_a_folding_origin_renames_is_one_key(fleet3, direct, raw):
    """MinIO folds a leading `/` and `./`: a write of `/cons/fold/v.parquet` changes
    `cons/fold/v.parquet` there, so no node may keep serving the folded key's old version."""
    nodes = fleet3
    n = random.randrange(10**9)  # a key of its own (an origin write of a cached one is unseen)
    key, raw = f"cons/fold{n}/v.parquet", raw.format(n)
    v1, v2 = os.urandom(100_000), os.urandom(100_000)
    direct.put_object(Bucket=BUCKET, Key=key, Body=v1)
    assert read_everywhere(nodes, key) == [(200, v1)] * 3
    put = send("PUT", nodes[0].port, raw, v2)
    at_origin = direct.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    if put.status != 200:
        # MinIO refuses some of these names (400): nothing changed, nothing may look changed.
        assert 400 <= put.status < 500 and at_origin == v1, put.status
        assert read_everywhere(nodes, key) == [(200, v1)] * 3
        return
    assert at_origin == v2, "MinIO folds the key"
    assert read_everywhere(nodes, key) == [(200, v2)] * 3
    # Reads of the unfolded name pass to the origin (never cached under another name).
    r = send("GET", nodes[1].port, raw)
    assert (r.status, r.data, r.headers.get("x-floe-cache")) == (200, v2, "pass")
    assert send("DELETE", nodes[2].port, raw).status == 204
    assert read_everywhere(nodes, key) == [(404, None)] * 3


def delete_objects_body(inner):
    return b'<?xml version="1.0" encoding="UTF-8"?>' + inner


@pytest.mark.parametrize("body", [
    b"<Delete><Object><Key>cons/del{n}/a.parquet</Key><Key>cons/del{n}/b.parquet</Key></Object></Delete>",
    b"junk<Delete><Object><Key>cons/del{n}/a.parquet</Key></Object></Delete>",
    b"<Delete><Object><Key>cons/del{n}/a.parquet</Key></Object>" + b" " * (2 << 20) + b"</Delete>",
], ids=["duplicate-key", "text-before-root", "over-2-MiB"])
def test_a_delete_objects_body_floe_cannot_read_never_reaches_the_origin(fleet3, direct, body):
    nodes = fleet3
    n = random.randrange(10**9)  # keys of its own (an origin write of a cached key is unseen)
    body = body.replace(b"{n}", str(n).encode())
    blobs = {k: os.urandom(50_000) for k in [f"cons/del{n}/a.parquet", f"cons/del{n}/b.parquet"]}
    for k, b in blobs.items():
        direct.put_object(Bucket=BUCKET, Key=k, Body=b)
        assert read_everywhere(nodes, k) == [(200, b)] * 3
    md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
    url = f"http://127.0.0.1:{nodes[0].port}/{BUCKET}?delete"
    req = sign("POST", url, body=body, headers={"Content-MD5": md5})
    r = HTTP.request("POST", url, body=body, headers=dict(req.headers))
    assert r.status == 400 and b"<Code>MalformedXML</Code>" in r.data, r.data[:300]
    for k, b in blobs.items():
        assert direct.get_object(Bucket=BUCKET, Key=k)["Body"].read() == b, "the origin deleted it"
        assert read_everywhere(nodes, k) == [(200, b)] * 3


def test_delete_objects_through_one_node_is_seen_by_every_node(fleet3, direct):
    nodes = fleet3
    keys = [f"cons/delmany/{i}.parquet" for i in range(3)]
    for k in keys:
        direct.put_object(Bucket=BUCKET, Key=k, Body=b"x" * 5000)
        assert read_everywhere(nodes, k) == [(200, b"x" * 5000)] * 3
    out = s3_client(nodes[1].port).delete_objects(
        Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in keys]})
    assert len(out["Deleted"]) == 3
    for k in keys:
        assert read_everywhere(nodes, k) == [(404, None)] * 3


def test_random_writes_and_reads_through_random_nodes_never_read_the_past(fleet3, direct):
    """Four writers (one per key at a time) and six readers over a 3-node fleet for 20 s: each
    GET returns the last write acknowledged before it began, or one whose request overlapped
    it; never an older one, never a deleted object after its 204."""
    nodes = fleet3
    keys = [f"cons/rand/{i}.parquet" for i in range(3)] + [f"cons/rand/{i}.bin" for i in range(2)]
    history = {k: [] for k in keys}  # (start, end, value): value None for a delete
    locks = {k: threading.Lock() for k in keys}
    for k in keys:
        body = f"{k}|0|".encode() + os.urandom(20_000)
        direct.put_object(Bucket=BUCKET, Key=k, Body=body)
        history[k].append([0.0, time.monotonic(), body])
    stop = time.monotonic() + 20
    T0 = time.monotonic()
    violations, counts = [], {"put": 0, "delete": 0, "get": 0}
    seq = iter(range(1, 10**9))

    def writer(seed):
        rnd = random.Random(seed)
        while time.monotonic() < stop:
            k = rnd.choice(keys)
            with locks[k]:
                nd = rnd.choice(nodes)
                delete = rnd.random() < 0.25
                value = None if delete else f"{k}|{next(seq)}|".encode() + os.urandom(rnd.randrange(1000, 400_000))
                # Listed before it is sent: a read overlapping it may already see it.
                entry = [time.monotonic(), float("inf"), value, nd.name]
                history[k].append(entry)
                r = send("DELETE", nd.port, k) if delete else send("PUT", nd.port, k, value)
                entry[1] = time.monotonic()
                assert r.status == (204 if delete else 200), (delete, r.status, r.data[:200])
                counts["delete" if delete else "put"] += 1

    def reader(seed):
        rnd = random.Random(seed)
        while time.monotonic() < stop:
            k, nd = rnd.choice(keys), rnd.choice(nodes)
            t0 = time.monotonic()
            r = send("GET", nd.port, k)
            t1 = time.monotonic()
            assert r.status in (200, 404), (r.status, r.data[:200])
            got = r.data if r.status == 200 else None
            counts["get"] += 1
            writes = [tuple(w[:3]) for w in history[k]]
            done = [w for w in writes if w[1] < t0]
            allowed = {done[-1][2]} if done else set()
            allowed |= {w[2] for w in writes if w[0] < t1 and w[1] >= t0}
            if got not in allowed:
                violations.append((t0 - T0, t1 - T0, k, nd.name, r.headers.get("x-floe-cache"), got[:30] if got else None,
                                   [a[:30] if a else None for a in allowed]))

    with concurrent.futures.ThreadPoolExecutor(10) as ex:
        futures = [ex.submit(writer, s) for s in range(4)] + [ex.submit(reader, 100 + s) for s in range(6)]
        for f in futures:
            f.result()
    print("ops:", counts, "violations:", len(violations))
    for v in violations[:10]:
        print("  ", v)
    assert counts["put"] > 50 and counts["get"] > 200
    for k in sorted({v[2] for v in violations}):  # the writes around each stale answer
        first = min(v[0] for v in violations if v[2] == k) + T0
        print(f"  writes of {k} near {first - T0:.3f} s (start, end, node, value):")
        for w in history[k]:
            if abs(w[0] - first) < 2 or abs(w[1] - first) < 2:
                print(f"    {w[0] - T0:.3f} {w[1] - T0:.3f} {w[3] if len(w) > 3 else 'origin'} {w[2][:30] if w[2] else None}")
    if violations:  # what the nodes said about forgets they could not deliver, for the report
        for nd in nodes:
            lines = nd.proc.log.read_text(errors="replace").splitlines()
            told = [ln[:300] for ln in lines if "forget" in ln and ('"WARN"' in ln or '"ERROR"' in ln)]
            print(nd.name, "forget warnings:", len(told), *told[:5], sep="\n  ")
    assert violations == []

